# SPDX-License-Identifier: MIT
# Extract every cudaError_t name from driver_types.h's enum cudaError as E(NAME) lines.
/^enum __device_builtin__ cudaError$/ { inside = 1; next }
inside && /^};/ { inside = 0 }
inside && match($0, /^ *(cuda[A-Za-z0-9_]+) *= *[0-9]+/) {
	name = $0
	sub(/^ */, "", name)
	sub(/ *=.*/, "", name)
	print "E(" name ")"
}
