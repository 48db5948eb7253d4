#!/bin/sh
# Runs a command (a make target of an image build) with pip pointed at what the build was given:
# the CA bundle of the build secret `host_ca`, the torch wheel directory, the torch index.
set -e
if [ -s /run/secrets/host_ca ]; then export PIP_CERT=/run/secrets/host_ca; fi
if [ -n "${TORCH_FIND_LINKS:-}" ]; then export PIP_FIND_LINKS="$TORCH_FIND_LINKS"; fi
if [ -n "${TORCH_INDEX_URL:-}" ]; then export PIP_EXTRA_INDEX_URL="$TORCH_INDEX_URL"; fi
exec "$@"
