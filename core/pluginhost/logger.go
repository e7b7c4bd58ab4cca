package pluginhost

import hclog "github.com/hashicorp/go-hclog"

// quietLogger is the logger handed to go-plugin. go-plugin logs the
// plugin's own stderr lines through Named(binary), which keeps their
// levels; everything go-plugin says itself ("plugin failed to exit
// gracefully", "plugin process exited" after a deliberate kill, …) is
// demoted to debug, because Start, Close and the *ExitError already
// report what matters in wcache's words.
type quietLogger struct{ hclog.Logger }

func (q quietLogger) Named(name string) hclog.Logger { return q.Logger.Named(name) }

func (q quietLogger) Log(_ hclog.Level, msg string, args ...any) { q.Logger.Debug(msg, args...) }
func (q quietLogger) Info(msg string, args ...any)               { q.Logger.Debug(msg, args...) }
func (q quietLogger) Warn(msg string, args ...any)               { q.Logger.Debug(msg, args...) }
func (q quietLogger) Error(msg string, args ...any)              { q.Logger.Debug(msg, args...) }
