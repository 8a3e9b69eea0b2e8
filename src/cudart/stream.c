/* SPDX-License-Identifier: MIT */
/* Streams, events, host functions and stream capture (queries only: the
 * driver under the emulator never captures; building graphs is refused). */
#include "rt.h"

/* cudaStreamNonBlocking is CU_STREAM_NON_BLOCKING. */
RT_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	if (!pStream || flags > cudaStreamNonBlocking)
		return rt_result(cudaErrorInvalidValue);
	CTX_OR_RETURN();
	return rt_cu(drv.cuStreamCreate((CUstream *)pStream, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

/* Priorities are accepted (every stream runs alike here). */
RT_API cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	(void)priority;
	return cudaStreamCreateWithFlags(pStream, flags);
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	if (leastPriority)
		*leastPriority = 0;
	if (greatestPriority)
		*greatestPriority = 0;
	return cudaSuccess;
}

RT_FORWARD(cudaStreamDestroy, cudaStream_t, cuStreamDestroy_v2)

RT_FORWARD(cudaStreamSynchronize, cudaStream_t, cuStreamSynchronize)

RT_FORWARD(cudaStreamQuery, cudaStream_t, cuStreamQuery)

RT_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuStreamWaitEvent(stream, event, flags));
}

RT_API cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuLaunchHostFunc(stream, fn, userData));
}

/* cudaEvent flags are CU_EVENT_* flags. */
RT_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuEventCreate((CUevent *)event, flags));
}

RT_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

RT_FORWARD(cudaEventDestroy, cudaEvent_t, cuEventDestroy_v2)

RT_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuEventRecord(event, stream));
}

RT_API cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	if (flags & ~(unsigned)cudaEventRecordExternal)
		return rt_result(cudaErrorInvalidValue);
	return cudaEventRecord(event, stream);
}

RT_FORWARD(cudaEventSynchronize, cudaEvent_t, cuEventSynchronize)

RT_FORWARD(cudaEventQuery, cudaEvent_t, cuEventQuery)

/* ---- capture ---- */

RT_API cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuStreamIsCapturing(stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

RT_API cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
						      enum cudaStreamCaptureStatus *captureStatus_out,
						      unsigned long long *id_out, cudaGraph_t *graph_out,
						      const cudaGraphNode_t **dependencies_out,
						      const cudaGraphEdgeData **edgeData_out,
						      size_t *numDependencies_out)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuStreamGetCaptureInfo_v3(stream, (CUstreamCaptureStatus *)captureStatus_out,
						   (cuuint64_t *)id_out, (CUgraph *)graph_out,
						   (const CUgraphNode **)dependencies_out,
						   (const CUgraphEdgeData **)edgeData_out, numDependencies_out));
}

RT_API cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	return rt_cu(drv.cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
}

/* Graph building: only ever called on a stream being captured, which never
 * happens here; refused, and said so, rather than faked. */
RT_API cudaError_t CUDARTAPI cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
								 const cudaGraphEdgeData *dependencyData,
								 size_t numDependencies, unsigned int flags)
{
	(void)stream, (void)dependencies, (void)dependencyData, (void)numDependencies, (void)flags;
	return rt_result(cudaErrorStreamCaptureUnsupported);
}

RT_API cudaError_t CUDARTAPI cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
							 const cudaGraphNode_t *pDependencies, size_t numDependencies,
							 cudaEvent_t event)
{
	(void)pGraphNode, (void)graph, (void)pDependencies, (void)numDependencies, (void)event;
	return rt_result(cudaErrorNotSupported);
}

RT_API cudaError_t CUDARTAPI cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
						      const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
						      size_t numDependencies)
{
	(void)graph, (void)from, (void)to, (void)edgeData, (void)numDependencies;
	return rt_result(cudaErrorNotSupported);
}

RT_API cudaError_t CUDARTAPI cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr, cudaHostFn_t destroy,
						  unsigned int initialRefcount, unsigned int flags)
{
	(void)object_out, (void)ptr, (void)destroy, (void)initialRefcount, (void)flags;
	return rt_result(cudaErrorNotSupported);
}

RT_API cudaError_t CUDARTAPI cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
						       unsigned int flags)
{
	(void)graph, (void)object, (void)count, (void)flags;
	return rt_result(cudaErrorNotSupported);
}
