/* SPDX-License-Identifier: MIT */
/* build/lib/libnvidia-ml.so.1: the part of NVML that NCCL's host code calls,
 * answering for cuemu's devices (DESIGN.md §15), so that NCCL runs on the
 * emulator. Never mistaken for the real one: every device is "cuemu".
 *
 * Devices: CUEMU_DEVICES (default 2), at the PCI addresses cuemu reports
 * (0000:BB:00.0 with bus BB = ordinal + 1). CUEMU_TOPO=nvswitch: every device has
 * NVLinks to one NVSwitch (NCCL then uses NVLS too); otherwise (pcie) there are
 * no NVLinks and peers reach each other over PCIe.
 *
 * The types and values below are NVML's published ABI (the NVML API reference),
 * written out here for the few calls served; the toolkit here ships no nvml.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};
enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
enum { NVML_P2P_STATUS_OK = 0, NVML_P2P_STATUS_NOT_SUPPORTED = 5 };
enum { NVML_P2P_CAPS_INDEX_NVLINK = 2 };
enum { NVML_VALUE_TYPE_UNSIGNED_INT = 1 };
/* Field ids NCCL asks for (NVLink counts and speeds). */
enum { FI_NVLINK_SPEED_COMMON = 90, FI_NVLINK_LINK_COUNT = 91, FI_NVSWITCH_CONNECTED_LINKS = 147 };

#define NVLINKS 18 /* an H100/H200's links, each to the NVSwitch */
#define MAX_DEVICES 16

/* nvmlPciInfo_t as the unversioned entry points take it (a 16-byte bus id first). */
struct nvml_pci_info {
	char busId[16];
	unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
	unsigned reserved[4];
};

struct nvml_field_value {
	unsigned fieldId, scopeId;
	long long timestamp, latencyUsec;
	int valueType;
	nvmlReturn_t nvmlReturn;
	union {
		double dVal;
		unsigned uiVal;
		unsigned long ulVal;
		unsigned long long ullVal;
		long long sllVal;
	} value;
};

struct nvml_device {
	int index;
};
typedef struct nvml_device *nvmlDevice_t;

/* The entry points served (NVML's names and ABI). */
API nvmlReturn_t nvmlInit_v2(void);
API nvmlReturn_t nvmlInit(void);
API nvmlReturn_t nvmlShutdown(void);
API const char *nvmlErrorString(nvmlReturn_t r);
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count);
API nvmlReturn_t nvmlDeviceGetCount(unsigned *count);
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device);
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *device);
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device);
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *device);
API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned *index);
API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor);
API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int caps, int *status);
API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int *isActive);
API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned link, int capability, unsigned *capResult);
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned link, struct nvml_pci_info *pci);
API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, struct nvml_field_value *values);
API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info);
API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, void *info);
API nvmlReturn_t nvmlSystemGetConfComputeState(void *state);
API nvmlReturn_t nvmlSystemGetConfComputeSettings(void *settings);

static struct nvml_device devices[MAX_DEVICES];
static int ndev = -1;
static int nvswitch;

static void configure(void)
{
	if (ndev >= 0)
		return;
	const char *n = getenv("CUEMU_DEVICES"), *topo = getenv("CUEMU_TOPO");
	ndev = n && *n ? atoi(n) : 2;
	if (ndev < 0 || ndev > MAX_DEVICES)
		ndev = 2;
	for (int i = 0; i < ndev; i++)
		devices[i].index = i;
	nvswitch = topo && !strcmp(topo, "nvswitch");
}

static int index_of(nvmlDevice_t d)
{
	configure();
	return d >= devices && d < devices + ndev ? d->index : -1;
}

API nvmlReturn_t nvmlInit_v2(void)
{
	configure();
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit(void)
{
	return nvmlInit_v2();
}

API nvmlReturn_t nvmlShutdown(void)
{
	return NVML_SUCCESS;
}

API const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported (cuemu)";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	default: return "Unknown Error";
	}
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
	configure();
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned)ndev;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned *count)
{
	return nvmlDeviceGetCount_v2(count);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device)
{
	configure();
	if (!device || index >= (unsigned)ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* "[domain:]bus:device[.function]", hexadecimal, as cuemu writes them. */
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device)
{
	configure();
	unsigned domain = 0, bus = 0, dev = 0, fn = 0;
	if (!busId || !device ||
	    (sscanf(busId, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) < 3 &&
	     sscanf(busId, "%x:%x.%x", &bus, &dev, &fn) < 2))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (domain || dev || fn || bus < 1 || bus > (unsigned)ndev)
		return NVML_ERROR_NOT_FOUND;
	*device = &devices[bus - 1];
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(busId, device);
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned *index)
{
	int i = index_of(device);
	if (i < 0 || !index)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = (unsigned)i;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	if (index_of(device) < 0 || !major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = 9; /* as cuemu's devices report */
	*minor = 0;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int caps, int *status)
{
	if (index_of(a) < 0 || index_of(b) < 0 || !status)
		return NVML_ERROR_INVALID_ARGUMENT;
	*status = caps == NVML_P2P_CAPS_INDEX_NVLINK && !nvswitch ? NVML_P2P_STATUS_NOT_SUPPORTED : NVML_P2P_STATUS_OK;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int *isActive)
{
	if (index_of(device) < 0 || !isActive || link >= NVLINKS)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!nvswitch)
		return NVML_ERROR_NOT_SUPPORTED;
	*isActive = NVML_FEATURE_ENABLED;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned link, int capability, unsigned *capResult)
{
	(void)capability;
	if (index_of(device) < 0 || !capResult || link >= NVLINKS)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!nvswitch)
		return NVML_ERROR_NOT_SUPPORTED;
	*capResult = 1;
	return NVML_SUCCESS;
}

/* Every link ends at the NVSwitch, at bus 0xff (outside cuemu's GPUs' buses). */
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned link, struct nvml_pci_info *pci)
{
	if (index_of(device) < 0 || !pci || link >= NVLINKS)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!nvswitch)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(pci, 0, sizeof(*pci));
	pci->bus = 0xff;
	snprintf(pci->busId, sizeof(pci->busId), "0000:ff:00.0");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, struct nvml_field_value *values)
{
	if (index_of(device) < 0 || count < 0 || (count && !values))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < count; i++) {
		struct nvml_field_value *v = &values[i];
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->nvmlReturn = NVML_SUCCESS;
		switch (v->fieldId) {
		case FI_NVLINK_LINK_COUNT:
		case FI_NVSWITCH_CONNECTED_LINKS: v->value.uiVal = nvswitch ? NVLINKS : 0; break;
		case FI_NVLINK_SPEED_COMMON: v->value.uiVal = nvswitch ? 25000 : 0; break;
		default: v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; break;
		}
	}
	return NVML_SUCCESS;
}

/* No fabric (multi-node NVLink), no platform information, no confidential computing. */
API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info)
{
	(void)device, (void)info;
	return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, void *info)
{
	(void)device, (void)info;
	return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlSystemGetConfComputeState(void *state)
{
	(void)state;
	return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlSystemGetConfComputeSettings(void *settings)
{
	(void)settings;
	return NVML_ERROR_NOT_SUPPORTED;
}
