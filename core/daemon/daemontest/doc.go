// Package daemontest runs wcache daemons for tests, in the manner of
// net/http/httptest: Start starts a real core/daemon.Daemon in process, on
// a real Unix socket in a private temporary folder, over an in-process
// backend (by default an sdk/mock.Memory), serving a generated
// checkpoint, and stops it and removes the folder when the test ends.
// Clients connect with core/client exactly as they would to `wcache
// serve`.
//
// Plugin adapts any sdk.Backend to daemon.Plugin with a process life the
// test controls (Crash), for tests that build the daemon themselves.
//
// Tests of core/daemon itself cannot import this package (it imports
// core/daemon); they use its two leaves, which Start is built of: testworld
// (the folder, layout and checkpoint, the Run loop, the attach) and
// testplugin (the same Plugin).
package daemontest
