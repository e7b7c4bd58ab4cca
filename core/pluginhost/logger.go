package pluginhost

import hclog "github.com/hashicorp/go-hclog"

// quietLogger is the logger handed to go-plugin. go-plugin would log the
// plugin's own stderr lines through Named(binary); that logger is off,
// because the log ring forwards those lines itself, with their field types
// (logForwarder). Everything go-plugin says itself ("plugin failed to exit
// gracefully", "plugin process exited" after a deliberate kill, …) is
// demoted to debug, because Start, Close and the *ExitError already
// report what matters in wcache's words.
type quietLogger struct {
	hclog.Logger
	binary string // the plugin's file name
}

func (q quietLogger) Named(name string) hclog.Logger {
	if name == q.binary {
		return hclog.NewNullLogger()
	}
	return q.Logger.Named(name)
}

func (q quietLogger) Log(_ hclog.Level, msg string, args ...any) { q.Logger.Debug(msg, args...) }
func (q quietLogger) Info(msg string, args ...any)               { q.Logger.Debug(msg, args...) }
func (q quietLogger) Warn(msg string, args ...any)               { q.Logger.Debug(msg, args...) }
func (q quietLogger) Error(msg string, args ...any)              { q.Logger.Debug(msg, args...) }
