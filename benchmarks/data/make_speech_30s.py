"""Made once: espeak-ng 1.51 reads speech_30s_script.txt (en-us, 150 words/min); the speech is
resampled to 16 kHz mono, padded with silence to exactly 30 s and stored as FLAC. The committed
file is the benchmark input; re-running needs espeak-ng (apt-get install -y espeak-ng) and PyAV.
Usage: python benchmarks/data/make_speech_30s.py"""
import os
import subprocess
import tempfile

import av
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RATE_HZ = 16_000
LENGTH_S = 30.0


def main() -> None:
    with open(os.path.join(HERE, "speech_30s_script.txt")) as f:
        text = f.read().strip()
    with tempfile.TemporaryDirectory() as tmp:
        wav = os.path.join(tmp, "speech.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", wav, text], check=True)
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE_HZ)
        chunks = []
        with av.open(wav) as container:
            for frame in container.decode(audio=0):
                chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
        chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    samples = np.concatenate(chunks)
    total = int(RATE_HZ * LENGTH_S)
    if samples.size > total:
        raise SystemExit(f"the speech is longer than {LENGTH_S} s; shorten the script")
    samples = np.concatenate([samples, np.zeros(total - samples.size, np.int16)])
    with av.open(os.path.join(HERE, "speech_30s.flac"), "w") as out:
        stream = out.add_stream("flac", rate=RATE_HZ, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="s16", layout="mono")
        frame.sample_rate = RATE_HZ
        for packet in stream.encode(frame):
            out.mux(packet)
        out.mux(stream.encode(None))


if __name__ == "__main__":
    main()
