#!/bin/sh
# step.sh NAME COMMAND [ARGS...]: runs one step of a make target between a
# banner and its measured wall-clock time, so that a long first build (which
# compiles every dependency) or a silent go vet says what it is doing and
# what it took. Exits with the command's status.
name=$1
shift
start=$(date +%s)
echo "== $name"
"$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ]; then
	echo "== $name: done in ${took} s"
else
	echo "== $name: FAILED (exit $rc) after ${took} s" >&2
fi
exit "$rc"
