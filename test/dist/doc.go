// Package dist tests what the project ships, as a user gets it: the release
// archive of `make dist` (unpacked alone in a temporary folder, run from its
// own files), the Python client's version, the Dockerfile and the
// Kubernetes DaemonSet that runs its image.
package dist
