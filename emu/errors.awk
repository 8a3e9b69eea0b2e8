# SPDX-License-Identifier: MIT
# Extract every CUresult name from cuda.h's cudaError_enum as E(NAME) lines.
/^typedef enum cudaError_enum/ { inside = 1; next }
inside && /^} CUresult;/ { inside = 0 }
inside && match($0, /^ *(CUDA_[A-Z0-9_]+) *=/) {
	name = $0
	sub(/^ */, "", name)
	sub(/ *=.*/, "", name)
	print "E(" name ")"
}
