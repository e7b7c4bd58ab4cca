# The release string, the same as the Go binaries' (internal/version.Version).
# `make wheel VERSION=x` writes x here in the copy it builds from; a test
# (test/dist) checks that this committed value equals internal/version's.
__version__ = "0.1.0-dev"
