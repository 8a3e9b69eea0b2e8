/* SPDX-License-Identifier: MIT */
/* cuemu-topo --kind pcie|nvswitch [--devices N]: print an NCCL topology (the
 * XML NCCL_TOPO_FILE names) for cuemu's devices, so that NCCL on the emulator
 * sees a machine it knows without reading /sys for GPUs that are not there:
 *   pcie      every GPU under one PCIe switch: NCCL's P2P transport (cuMem
 *             buffers shared as POSIX FDs) between them;
 *   nvswitch  the same, and every GPU's 18 NVLinks to one NVSwitch: NVLS
 *             (multicast) too.
 * Devices: --devices, else CUEMU_DEVICES, else 2; their PCI addresses are
 * cuemu's (0000:BB:00.0, BB = ordinal + 1). Exit 64 on bad usage. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f, int rc)
{
	fprintf(f, "usage: cuemu-topo --kind pcie|nvswitch [--devices N]\n"
		   "  prints the NCCL topology (NCCL_TOPO_FILE) of cuemu's devices on stdout\n");
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"kind", required_argument, NULL, 'k'},
					     {"devices", required_argument, NULL, 'd'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *kind = NULL, *env = getenv("CUEMU_DEVICES");
	int ndev = env && *env ? atoi(env) : 2, c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'k': kind = optarg; break;
		case 'd': ndev = atoi(optarg); break;
		case 'h': return usage(stdout, 0);
		default: return usage(stderr, 64);
		}
	}
	if (optind != argc || !kind || (strcmp(kind, "pcie") && strcmp(kind, "nvswitch")))
		return usage(stderr, 64);
	if (ndev < 1 || ndev > 16) {
		fprintf(stderr, "cuemu-topo: --devices %d: cuemu has 1 to 16 devices\n", ndev);
		return 64;
	}
	bool nvswitch = !strcmp(kind, "nvswitch");
	/* The switch's address is one no machine of this kind has in /sys (NCCL
	 * reads /sys for a PCI node that exists there). */
	printf("<system version=\"1\">\n"
	       "  <cpu numaid=\"0\" affinity=\"ffffffff,ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
	       "familyid=\"6\" modelid=\"143\">\n"
	       "    <pci busid=\"0000:c0:00.0\" class=\"0x060400\" vendor=\"0x10b5\" device=\"0xc010\" "
	       "subsystem_vendor=\"0x10b5\" subsystem_device=\"0xc010\" link_speed=\"32.0 GT/s PCIe\" "
	       "link_width=\"16\">\n");
	for (int d = 0; d < ndev; d++) {
		printf("      <pci busid=\"0000:%02x:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2335\" "
		       "subsystem_vendor=\"0x10de\" subsystem_device=\"0x18be\" link_speed=\"32.0 GT/s PCIe\" "
		       "link_width=\"16\">\n"
		       "        <gpu dev=\"%d\" sm=\"90\">\n",
		       d + 1, d);
		if (nvswitch)
			printf("          <nvlink target=\"0000:ff:00.0\" count=\"18\" tclass=\"0x068000\"/>\n");
		printf("        </gpu>\n      </pci>\n");
	}
	printf("    </pci>\n  </cpu>\n</system>\n");
	return 0;
}
