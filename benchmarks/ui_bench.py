"""The web page's own latency: time from Send to the first rendered token in headless Chromium,
minus the server's TTFT for that request (what the page, the browser and the loopback add).

    python benchmarks/ui_bench.py                 # 20 rounds after 3 warm-up rounds
    python benchmarks/ui_bench.py --rounds 50

Starts laneserve on SmolLM2 (one lane, one thread, request records on) and the distribution's
chromium + chromedriver (tests/gateway/ui/browser.py). Each round opens a new chat on /ui and sends
the same short question (temperature 0, 8 tokens) by the page's own Send button; a MutationObserver
installed just before the click stamps (performance.now) the first DOM change that puts text in the
answer, and the next animation frame after it (the frame that paints it). The server's TTFT is
its record's `ttft_ms` for the page's X-Request-ID (arrival → first content written to the socket).

Prints ONE line: (send → first token in the DOM) − server TTFT, p50 / p90 / max over the rounds, the
same to the next painted frame, and the server TTFT p50. Target: p50 ≤ 50 ms.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gateway" / "ui"))
from browser import ChatPage, missing, start_chrome, wait_for  # noqa: E402
from gateway.cli.bench.launcher import start_laneserve  # noqa: E402
from gateway.cli.bench.metrics import percentile  # noqa: E402

QUESTION = "Say hello."
# Stamps the Send click, the first DOM change that gives the new answer text, and the next frame.
SEND_AND_STAMP = """
const done = arguments[arguments.length - 1];
const messages = document.getElementById('messages');
const before = messages.querySelectorAll('.message.assistant').length;
const stamps = {};
const observer = new MutationObserver(() => {
  const answers = messages.querySelectorAll('.message.assistant .answer');
  if (answers.length > before && answers[answers.length - 1].textContent) {
    stamps.dom = performance.now();
    observer.disconnect();
    requestAnimationFrame(() => { stamps.paint = performance.now(); done(stamps); });
  }
});
observer.observe(messages, {childList: true, subtree: true, characterData: true});
document.getElementById('prompt').value = arguments[0];
stamps.send = performance.now();
document.getElementById('send').click();
"""


def round_ms(page: ChatPage, server) -> tuple[float, float, float]:
    """(DOM − TTFT, paint − TTFT, TTFT) of one question, in ms."""
    page.find("#new-chat").click()
    stamps = page.driver.execute_async_script(SEND_AND_STAMP, QUESTION)
    page.wait_done()
    record = server.records(page.request_id())[0]
    ttft = record["ttft_ms"]
    return stamps["dom"] - stamps["send"] - ttft, stamps["paint"] - stamps["send"] - ttft, ttft


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    reason = missing()
    if reason:
        print(f"ui_bench: {reason} (apt-get install chromium chromium-driver; pip install selenium)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ui_bench_"))
    server = start_laneserve("--replicas", "1", "--threads", "1", "--ctx-size", "512", "--log-level", "warning",
                             records_path=tmp / "records.jsonl", log_path=tmp / "server.log", cwd=tmp)
    driver = None
    try:
        server.wait_ready()
        driver = start_chrome()
        driver.set_script_timeout(60)
        page = ChatPage(driver, server.base_url).open()
        page.settings(temperature="0", max_tokens="8")
        results = [round_ms(page, server) for _ in range(args.warmup + args.rounds)][args.warmup:]
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
    dom, paint, ttft = (sorted(r[i] for r in results) for i in range(3))
    print(f"ui_bench: send -> first token in the DOM minus server TTFT p50 {percentile(dom, 50):.1f} ms, "
          f"p90 {percentile(dom, 90):.1f} ms, max {dom[-1]:.1f} ms; to the painted frame p50 "
          f"{percentile(paint, 50):.1f} ms, p90 {percentile(paint, 90):.1f} ms; server TTFT p50 "
          f"{percentile(ttft, 50):.1f} ms; {len(results)} rounds, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
