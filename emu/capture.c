/* SPDX-License-Identifier: MIT */
/* Stream-capture queries, at every ABI a runtime asks for by version: cuemu
 * never captures (no graphs), so every stream reports that it is not
 * capturing; the thread's capture mode is kept and exchanged as cuda.h says. */
#include "emu.h"

/* cuda.h maps these names to their newest ABI; the older ones are exported too. */
#undef cuStreamGetCaptureInfo
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				   CUgraph *graph_out, const CUgraphNode **dependencies_out,
				   size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				   CUgraph *graph_out, const CUgraphNode **dependencies_out,
				   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out);

static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Not capturing: the status, and nothing else (cuda.h: the other outputs are
 * set only while capturing; zeroed here so that a reader finds no garbage). */
static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!emu_stream_known(h))
		return CUDA_ERROR_INVALID_HANDLE;
	*status = CU_STREAM_CAPTURE_STATUS_NONE;
	if (id)
		*id = 0;
	if (graph)
		*graph = NULL;
	if (deps)
		*deps = NULL;
	if (edges)
		*edges = NULL;
	if (ndeps)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	EMU_CALL(cuStreamIsCapturing, capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL));
}

EMU_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
	EMU_CALL(cuStreamGetCaptureInfo, capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL));
}

EMU_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					   cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out,
					   size_t *numDependencies_out)
{
	EMU_CALL(cuStreamGetCaptureInfo_v2, capture_info(hStream, captureStatus_out, id_out, graph_out,
							 dependencies_out, NULL, numDependencies_out));
}

EMU_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					   cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out,
					   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	EMU_CALL(cuStreamGetCaptureInfo_v3, capture_info(hStream, captureStatus_out, id_out, graph_out,
							 dependencies_out, edgeData_out, numDependencies_out));
}

static CUresult exchange_mode(CUstreamCaptureMode *mode)
{
	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	EMU_CALL(cuThreadExchangeStreamCaptureMode, exchange_mode(mode));
}
