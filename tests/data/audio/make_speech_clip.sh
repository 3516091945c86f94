#!/bin/sh
# Made once with espeak-ng 1.51 (apt-get install -y espeak-ng); the committed WAVs are the test
# data, so tests never need a synthesiser. Script texts: speech_script.txt, speech_de_script.txt.
set -eu
cd "$(dirname "$0")"
espeak-ng -v en-us -s 150 -w speech_en.wav "$(cat speech_script.txt)"
espeak-ng -v de -s 140 -w speech_de.wav "$(cat speech_de_script.txt)"
