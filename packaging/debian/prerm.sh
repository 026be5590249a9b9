#!/bin/sh
# Before the package goes: stop the gateways it runs.
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop 'sluice.service' 'sluice@*.service' || true
fi
