#!/bin/sh
#  meson install's last step: the example broker config ($1) into the config
#  directory ($2, under $DESTDIR), unless a config is there already, so an
#  admin's edits outlive a reinstall.
set -eu
directory="${DESTDIR:-}$2"
mkdir -p "$directory"
if [ -e "$directory/dsh-broker.cfg" ]; then
    echo "Keeping $2/dsh-broker.cfg (the example is $1)"
else
    install -m 644 "$1" "$directory/dsh-broker.cfg"
    echo "Installing $1 to $2"
fi
