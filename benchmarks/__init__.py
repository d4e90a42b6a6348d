"""jaxdp's benchmarks: ``python -m benchmarks`` lists them, ``python -m benchmarks NAME [options]`` runs one."""
