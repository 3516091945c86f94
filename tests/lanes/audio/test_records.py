"""Audio lane records and helpers without a model: wire round trips, delta joining, PCM segments."""
import struct

import numpy as np
import pytest

from lanes.audio import pcm
from lanes.audio.records import AudioJob, decode_audio_request, decode_transcript, encode_audio_request, encode_transcript
from lanes.audio.transcriber import DeltaJoiner, transcribe_options
from lanes.names import new_run_id


def test_audio_request_round_trip():
    job = AudioJob(2**63 + 1, "/laneserve-1-ab-pcm-1", 16000 * 30, translate=True, word_timestamps=True,
                   language="de", prompt="Grüße, ✓", temperature=0.4)
    back = decode_audio_request(encode_audio_request(job))
    assert back.request_id == job.request_id and back.shm_name == job.shm_name and back.num_samples == job.num_samples
    assert (back.translate, back.word_timestamps, back.language, back.prompt) == (True, True, "de", "Grüße, ✓")
    assert back.temperature == pytest.approx(0.4)
    plain = decode_audio_request(encode_audio_request(AudioJob(1, "n", 1)))
    assert (plain.translate, plain.word_timestamps, plain.language, plain.prompt, plain.temperature) == \
        (False, False, "", "", -1.0)


def test_bad_audio_requests_are_rejected():
    payload = encode_audio_request(AudioJob(5, "name", 10, prompt="p"))
    with pytest.raises(ValueError, match="truncated"):
        decode_audio_request(payload[:10])
    with pytest.raises(ValueError, match="sizes"):
        decode_audio_request(payload + b"x")
    with pytest.raises(ValueError):
        AudioJob(0, "n", 1)
    with pytest.raises(ValueError):
        AudioJob(1, "n", 0)


def test_transcript_round_trip():
    rid, kind, value = decode_transcript(encode_transcript(7, "segment", {"id": 0, "text": " é"}))
    assert (rid, kind, value) == (7, "segment", {"id": 0, "text": " é"})
    with pytest.raises(ValueError):
        decode_transcript(struct.pack("<QII", 1, 9, 0) + b"{}")  # unknown kind


@pytest.mark.parametrize("segments, text", [
    ([" Hello world.", " Second one."], "Hello world. Second one."),
    (["  ", " Hi ", "", " there  "], "Hi  there"),  # held whitespace goes out before more text
    ([" a", "b ", " c"], "ab  c"),
    ([], ""),
])
def test_deltas_concatenate_to_the_stripped_transcript(segments, text):
    joiner = DeltaJoiner()
    assert "".join(joiner.push(s) for s in segments) == text


def test_temperature_and_task_options():
    assert transcribe_options("", "", -1.0, False, False)["temperature"] == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    opts = transcribe_options("en", "names", 0.3, True, True)
    assert opts == {"task": "translate", "language": "en", "initial_prompt": "names", "temperature": 0.3,
                    "word_timestamps": True}


def test_pcm_segment_round_trip():
    name = pcm.segment_name(new_run_id(), 42)
    samples = np.linspace(-1, 1, 1000, dtype=np.float32)
    pcm.write_segment(name, samples)
    try:
        assert np.array_equal(pcm.read_segment(name, 1000), samples)
        assert np.array_equal(pcm.read_segment(name, 10), samples[:10])
        with pytest.raises(ValueError):
            pcm.read_segment(name, 1001)
    finally:
        pcm.unlink_segment(name)
    pcm.unlink_segment(name)  # idempotent
    with pytest.raises(ValueError):
        pcm.write_segment(name, np.zeros(0, np.float32))


def test_malformed_transcript_records_become_none():
    from lanes.audio.records import transcript_part

    rid, part = transcript_part(encode_transcript(9, "segment", {"id": 1}))
    assert rid == 9 and part.kind == "segment" and part.value == {"id": 1}
    assert transcript_part(struct.pack("<QII", 4, 2, 0) + b"\xff{")[1] is None  # not UTF-8 JSON
    assert transcript_part(struct.pack("<QII", 4, 2, 0) + b"[1]")[1] is None   # not an object
    assert transcript_part(b"\x01\x02") == (0, None)
