package backendplugin

// EnvFDChannel names the variable by which the host tells a plugin which
// of its descriptors is the plugin descriptor channel: one end of a
// SOCK_SEQPACKET socketpair the host created at plugin start (passed with
// exec.Cmd.ExtraFiles, so normally "3"). Descriptor handles (Handle.File)
// cross the plugin boundary on it; see docs/protocol.md, "Plugin
// descriptor channel".
const EnvFDChannel = "WCACHE_BACKEND_FD_CHANNEL"

// EnvLogLevel names the variable the host sets to the level it forwards
// (trace, debug, info, warn, error). The plugin's logger honours it;
// default "debug".
const EnvLogLevel = "WCACHE_BACKEND_LOG_LEVEL"
