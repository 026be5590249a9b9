#!/bin/sh
# After the package is unpacked: the user the service runs as, then
# systemd told of the units. The service is not started: it needs
# /etc/sluice/sluice.toml, which the administrator writes.
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/sluice.conf
elif ! getent passwd sluice >/dev/null; then
	adduser --system --group --home /var/lib/sluice --no-create-home sluice
fi
# /etc/sluice (0750) is readable by the service's group: its configuration
# and key files go there, keys 0640 root:sluice.
chgrp sluice /etc/sluice
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
