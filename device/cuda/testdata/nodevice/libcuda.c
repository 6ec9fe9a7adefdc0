/*
 * A CUDA driver with no device, for TestGPUTestsFailWithoutADevice: cuInit
 * succeeds and cuDeviceGetCount reports zero devices, as a machine with a
 * driver but no usable GPU does. Nothing else is defined: the driver's
 * symbols are bound lazily, and a test binary that fails as it should calls
 * no other.
 */
int cuInit(unsigned int flags) {
	(void)flags;
	return 0; /* CUDA_SUCCESS */
}

int cuDeviceGetCount(int *count) {
	*count = 0;
	return 0;
}
