"""--mmproj at start-up: the setting's validation, the projectors' clear errors (a model that is not a --model, not
a GGUF text model, whose n_embd differs from the projector's output, or whose vocabulary lacks the marker tokens), and what a projector's lanes are sized for
(request ring holding a whole context of image rows, max_batch_tokens holding a gemma3 image beside the slots)."""
import numpy as np
import pytest

from gateway.serve.lanes import lane_specs
from gateway.server.config import ConfigError, GatewayConfig, config_from_strings
from gateway.server.entries import MmprojEntry, ModelEntry
from gateway.vision.serving import lane_needs, load_projectors, missing_marker_tokens
from lanes import gemma3_path, smollm2_path, wire
from lanes.api import GenerationParams, PromptImage
from lanes.channels import request_ring_capacity

from .pictures import mmproj_gguf

pytestmark = pytest.mark.real_model


def test_setting_validation():
    config = config_from_strings({"models": ["g=gemma3", "s=smollm2"], "mmproj": ["g=/x/mm.gguf"]})
    assert config.mmproj == (MmprojEntry("g", "/x/mm.gguf"),)
    with pytest.raises(ConfigError, match="mmproj 'other': not a --model name"):
        GatewayConfig(models=(ModelEntry("g", "gemma3"),), mmproj=(MmprojEntry("other", "/x"),))
    with pytest.raises(ConfigError, match="more than one projector"):
        GatewayConfig(models=(ModelEntry("g", "gemma3"),), mmproj=(MmprojEntry("g", "/x"), MmprojEntry("g", "/y")))
    with pytest.raises(ConfigError, match="expected NAME=MMPROJ_GGUF"):
        config_from_strings({"mmproj": ["just-a-path.gguf"]})


def test_projector_errors_name_the_setting(mmproj):
    def config(name, source):
        return GatewayConfig(models=(ModelEntry(name, source),), mmproj=(MmprojEntry(name, mmproj),))
    with pytest.raises(ValueError, match=r"mmproj s=.*: .*outputs 640-wide embeddings but the text model's n_embd is 576"):
        load_projectors(config("s", "smollm2"), {"s": str(smollm2_path())}, 1)
    with pytest.raises(ValueError, match="not a GGUF text model"):
        load_projectors(config("t", "synthetic:step_us=1"), {"t": "synthetic:step_us=1"}, 1)
    missing = GatewayConfig(models=(ModelEntry("g", "gemma3"),), mmproj=(MmprojEntry("g", mmproj + ".missing"),))
    with pytest.raises(ValueError, match=r"mmproj g=.*\.missing"):
        load_projectors(missing, {"g": str(gemma3_path())}, 1)


def test_a_text_model_without_the_marker_tokens(tmp_path):
    from gateway.text.model_text import ModelText

    idefics = mmproj_gguf.write_mmproj(tmp_path / "i.gguf", mmproj_gguf.SPECS["idefics3"])  # 576-wide, as SmolLM2
    config = GatewayConfig(models=(ModelEntry("s", "smollm2"),), mmproj=(MmprojEntry("s", str(idefics)),))
    projectors = load_projectors(config, {"s": str(smollm2_path())}, 1)
    assert "lacks the idefics3 image marker token '<fake_token_around_image>'" in \
        missing_marker_tokens(projectors, {"s": ModelText(str(smollm2_path()))})


def test_lanes_sized_for_images(mmproj):
    config = GatewayConfig(models=(ModelEntry("g", "gemma3"), ModelEntry("s", "smollm2")),
                           mmproj=(MmprojEntry("g", mmproj),), parallel=8, max_batch_tokens=16, ctx_size=512)
    paths = {"g": str(gemma3_path()), "s": str(smollm2_path())}
    needs = lane_needs(load_projectors(config, paths, 1))
    specs = {s.name: s for s in lane_specs(config, paths, needs)}
    tokens = mmproj_gguf.SPECS["gemma3"].image_size // 8 // 2  # patch 8, pooled 2×2
    assert specs["g"].max_batch_tokens == tokens * tokens + 8 and specs["g"].image_n_embd == 640
    assert specs["s"].max_batch_tokens == 16 and specs["s"].image_n_embd == 0
    # A request whose whole context is image rows, in the most image entries a request may carry, fits one record.
    per = 512 // wire.MAX_REQUEST_IMAGES
    images = tuple(PromptImage(k * per, np.zeros((per, 640), np.float32), True, k) for k in range(wire.MAX_REQUEST_IMAGES))
    payload = wire.encode_request(1, [0] * 512, GenerationParams(max_tokens=1, images=images), 1)
    assert len(payload) + 64 <= request_ring_capacity(512, 640) // 4 and request_ring_capacity(512) // 4 < len(payload)
