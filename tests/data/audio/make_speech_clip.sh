#!/bin/sh
# Made once with espeak-ng 1.51 (apt-get install -y espeak-ng); the committed WAV is the test
# data, so tests never need a synthesiser. Script text: speech_script.txt.
set -eu
cd "$(dirname "$0")"
espeak-ng -v en-us -s 150 -w speech_en.wav "$(cat speech_script.txt)"
