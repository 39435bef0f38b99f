#!/bin/sh
#  meson install's last step: the example broker config ($1) into the config
#  directory ($2, under $DESTDIR), unless a config is there already, so an
#  admin's edits outlive a reinstall.
set -eu
directory="${DESTDIR:-}$2"
mkdir -p "$directory"
[ -e "$directory/dsh-broker.cfg" ] || install -m 644 "$1" "$directory/dsh-broker.cfg"
