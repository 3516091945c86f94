"""The native extension imports and reports which CPU paths it verified by execution."""
import lanes._runtime as rt


def test_reports_usable_and_advertised_paths():
    info = rt.cpu_features()
    usable, advertised = info["usable"], info["advertised"]
    assert set(usable) == {"avx2", "avx512", "avx512_vnni", "avx_vnni", "amx_int8"}
    # Usable is never claimed beyond what cpuid/XGETBV advertise.
    assert not usable["avx2"] or (advertised["avx2"] and advertised["fma"] and advertised["f16c"])
    assert not usable["avx512"] or (advertised["avx512f"] and advertised["avx512bw"] and usable["avx2"])
    assert not usable["avx512_vnni"] or (advertised["avx512_vnni"] and usable["avx512"])
    assert not usable["avx_vnni"] or advertised["avx_vnni"]
    assert not usable["amx_int8"] or (advertised["amx_int8"] and usable["avx512_vnni"])
    names = [k for k in ("avx2", "avx512", "avx512_vnni", "avx_vnni", "amx_int8") if usable[k]]
    assert info["summary"] == (" ".join(names) or "scalar")


def test_advertised_features_that_execute_are_usable():
    # On a machine that advertises these (this one does), the execution probes must succeed.
    info = rt.cpu_features()
    adv, usable = info["advertised"], info["usable"]
    if adv["avx2"] and adv["fma"] and adv["f16c"]:
        assert usable["avx2"]
    if usable["avx2"] and adv["avx512f"] and adv["avx512bw"] and adv["avx512vl"]:
        assert usable["avx512"]
        if adv["avx512_vnni"]:
            assert usable["avx512_vnni"]
    if usable["avx2"] and adv["avx_vnni"]:
        assert usable["avx_vnni"]


def test_faulting_instruction_is_caught_not_fatal():
    # Some VMs advertise AMX and fault on it; the harness must survive such an instruction.
    assert rt.sigill_probe_self_test() is True
    assert rt.sigill_probe_self_test() is True  # and can do it again
