import pytest

import lanes._runtime as rt


@pytest.fixture(params=rt.quant.usable_isas())
def isa(request):
    """Each kernel path this CPU can run, made the active one for the test."""
    before = rt.quant.active_isa()
    assert rt.quant.set_isa(request.param)
    yield request.param
    rt.quant.set_isa(before)
