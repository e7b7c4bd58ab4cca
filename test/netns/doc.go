// Package netns makes "two hosts" on one machine for the cross-node tests:
// two Linux network namespaces joined by a veth pair, each end with an
// address of a private /30 (10.231.0.1 on host A, 10.231.0.2 on host B).
// Nothing of the machine's own network changes: both ends live inside the
// namespaces, so every pair can use the same addresses and parallel tests
// do not collide.
//
// A test runs a real process on a host with Host.Start (through `ip netns
// exec`, which execs the program: the started process is the program
// itself, so signalling it reaches it) and opens sockets on a host from
// the test process itself with Host.DialContext and Host.Listen (the
// socket is created on an OS thread that entered the namespace; the
// thread is never used for anything else).
//
// It needs Linux, the `ip` command (iproute2) and the capabilities to
// make namespaces and links (CAP_SYS_ADMIN and CAP_NET_ADMIN: root, as CI
// runs). Without them New skips the test and says which is missing.
//
// Cleanup is registered with t.Cleanup. A namespace's name carries the
// pid and start time of the test process that made it
// (wcache-test-<pid>.<start>-<random>-a); New deletes the names left by a
// run that no longer exists (killed before its cleanup), never those of a
// live run. Processes a killed run left inside them are its children, and
// Host.Start makes them die with their parent (PR_SET_PDEATHSIG).
package netns
