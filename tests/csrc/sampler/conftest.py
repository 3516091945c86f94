"""Fixtures for the sampler tests: run kernel-sensitive tests on both kernel paths."""
import pytest

import lanes._runtime as rt


@pytest.fixture(params=["native", "portable"])
def kernel_path(request):
    """'native' = whatever the CPU verified (AVX2 here); 'portable' = forced scalar C++."""
    if request.param == "native" and not rt._sampler_using_avx2():
        pytest.skip("no AVX2 on this machine: native == portable")
    rt._sampler_force_portable(request.param == "portable")
    yield request.param
    rt._sampler_force_portable(False)
