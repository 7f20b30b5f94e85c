#!/usr/bin/env bash
# apt-get, one at a time among this project's scripts: `.ci/run` builds caches beside a running suite, and two
# installs (or an update beside an install) would otherwise fail on apt's own locks. The lock is held by flock
# for the command's duration and not passed to it (-o), so a daemon a package's postinst starts cannot keep it.
# apt's DPkg::Lock::Timeout, where a caller gives it, still waits for an apt that is not ours.
mkdir -p /run/lock # a container may start without it
exec flock -o /run/lock/ina-apt.lock apt-get "$@"
