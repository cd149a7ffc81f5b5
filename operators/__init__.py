"""What can be sampled and how it becomes code: the operator catalog, graph sampling on the meta device,
sizing, rendering to KernelBench format, and the ATen labels that keep `ops` true."""
