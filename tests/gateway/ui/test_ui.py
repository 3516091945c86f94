"""The web chat page (gateway/ui/) in headless Chromium against real servers: SmolLM2 (the session
`server`), the scripted thinking model (`think_server`) and a server with an API key. Screenshots
of the main states go to the artefacts folder (browser.artefacts_dir)."""
from __future__ import annotations

import re
import time
from importlib import resources
from pathlib import Path

import httpx
import pytest

import browser
from browser import ChatPage, console_errors, requested_urls, wait_for

REPO = Path(__file__).resolve().parents[3]
KEY = "ls-ui-test-7c2d9e41"
HOSTILE = '<img src=x onerror=alert(1)> <script>alert(1)</script> <b onmouseover="document.title=1">bold</b>'


# --- served files, no browser -------------------------------------------------------------------

def test_every_static_file_ships_with_the_package():
    """The imported package (in CI: the installed wheel) holds every file of gateway/ui/static."""
    shipped = {entry.name for entry in (resources.files("gateway.ui") / "static").iterdir()}
    source = {p.name for p in (REPO / "gateway" / "ui" / "static").iterdir()}
    assert source and source <= shipped


def test_page_and_files_are_served_with_their_types_and_policy(base_url):
    with httpx.Client(base_url=base_url, timeout=10) as http:
        for path in ("/ui", "/ui/"):
            page = http.get(path)
            assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert "connect-src 'self'" in page.headers["content-security-policy"]
            assert page.headers["x-content-type-options"] == "nosniff"
        for name in re.findall(r'(?:src|href)="/ui/([^"]+)"', page.text):
            assert http.get(f"/ui/{name}").status_code == 200, name
        assert http.get("/ui/app.js").headers["content-type"] == "text/javascript; charset=utf-8"
        assert http.get("/ui/style.css").headers["content-type"] == "text/css; charset=utf-8"
        assert http.get("/ui/missing.js").status_code == 404
        assert http.get("/ui/static/app.js").status_code == 404  # one level only, no folder walk
        assert http.get("/").text == "Ollama is running"


# --- the page against SmolLM2 -------------------------------------------------------------------

def test_page_loads_without_console_errors_or_requests_outside_the_server(page, artefacts):
    page.open()
    assert page.model_names() == ["smollm2"]
    urls = requested_urls(page.driver)
    assert {url.split("?")[0] for url in urls} >= {page.base_url + path for path in
                                                   ("/ui", "/ui/app.js", "/ui/style.css", "/v1/models")}
    assert all(url.startswith(page.base_url + "/") for url in urls), urls
    assert console_errors(page.driver) == []
    page.screenshot(artefacts, "01-empty")


def test_an_answer_streams_token_by_token_with_statistics_and_history(page, server, artefacts):
    page.open()
    page.settings(temperature="0", max_tokens="120")
    page.send("Count from 1 to 40, separated by commas.")
    lengths = []
    while page.streaming():  # bounded: max_tokens 120 at tens of tokens per second
        lengths.append(len(page.answer_text()))
        assert len(lengths) < 2000, "the answer did not end"
        time.sleep(0.02)
    growth = sorted(set(lengths))
    assert len(growth) >= 3 and growth[-1] > growth[0], lengths  # seen growing at least three times
    first_id = page.request_id()
    stats = page.last_answer().find_element("css selector", ".stats").text
    match = re.fullmatch(r"TTFT (\d+) ms · ([\d.]+) tok/s · (\d+) prompt tokens · (\d+) generated.*", stats)
    assert match, stats
    record = server.records(first_id)[0]
    assert record["outcome"] == "success" and record["stream"] is True
    assert int(match[3]) == record["prompt_tokens"] and int(match[4]) == record["completion_tokens"]
    assert abs(int(match[1]) - record["ttft_ms"]) <= 1
    page.screenshot(artefacts, "02-answer")

    page.send("And now backwards?")  # the history goes with it
    page.wait_done()
    second = server.records(page.request_id())[0]
    assert second["prompt_tokens"] > record["prompt_tokens"] + record["completion_tokens"]

    assert all(url.startswith(page.base_url + "/") for url in requested_urls(page.driver))
    page.driver.refresh()  # the conversation was kept
    wait_for(page.model_names, what="the model list")
    assert page.find_all("#conversations li")[0].text.startswith("Count from 1 to 40")
    assert len(page.answers()) == 2 and page.answers()[0].get_attribute("data-request-id") == first_id
    assert console_errors(page.driver) == []


def test_stop_ends_the_stream_and_cancels_on_the_server(driver, own_server, artefacts):
    # A lane that takes 20 ms per token and never ends early: Stop meets a running stream however
    # slow the browser is (a real model may finish a short answer first).
    server = own_server("--model", "fake=synthetic:step_us=20000,prefill_us_per_token=0,n_ctx=1024",
                        "--ctx-size", "1024", real_model=False)
    server.wait_ready()
    driver.set_window_size(1200, 900)
    page = ChatPage(driver, server.base_url)
    page.open()
    page.settings(temperature="0", max_tokens="400")
    page.send("Count from 1 to 300, one number per line.")
    wait_for(lambda: len(page.answer_text()) > 20, what="some answer text")
    assert page.streaming()
    started_s = time.monotonic()
    page.find("#stop").click()
    page.wait_done(timeout_s=10)
    assert time.monotonic() - started_s < 5
    record = server.records(page.request_id())[0]
    assert record["outcome"] == "cancelled", record
    assert record["completion_tokens"] < 400
    assert page.last_answer().find_element("css selector", ".stats").text.endswith("stopped")
    assert page.find("#send").is_displayed() and not page.find("#stop").is_displayed()
    assert console_errors(page.driver) == []
    page.screenshot(artefacts, "03-stopped")


def test_hostile_text_in_messages_and_history_renders_as_text(page, artefacts):
    stored = {"id": "c1", "title": "stored", "model": "smollm2", "updated": 1, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "requestId": "r1",
         "content": f"{HOSTILE}\n\n[click](javascript:alert(1)) [ok](https://example.org/x)\n\n```html\n{HOSTILE}\n```",
         "toolCalls": [{"name": "<img src=x onerror=alert(1)>", "arguments": '{"q": "<script>alert(1)</script>"}'}]}]}
    page.open({"laneserve.conversations": [stored]})
    page.find("#conversations .open").click()
    page.settings(max_tokens="8")
    page.send(HOSTILE)
    page.wait_done()
    messages = page.find("#messages")
    for tag in ("img", "script", "b", "iframe"):
        assert page.driver.execute_script(f"return arguments[0].querySelectorAll('{tag}').length", messages) == 0, tag
    assert page.find_all(".message.user .text")[-1].get_attribute("textContent") == HOSTILE
    answer = page.answers()[0].find_element("css selector", ".answer")
    assert answer.get_attribute("textContent").count("<script>alert(1)</script>") == 2  # paragraph and code block
    call = page.answers()[0].find_element("css selector", ".tool-call").get_attribute("textContent")
    assert call == '<img src=x onerror=alert(1)>({"q": "<script>alert(1)</script>"})'
    links = answer.find_elements("css selector", "a")
    assert [(a.get_attribute("href"), a.get_attribute("rel")) for a in links] == \
        [("https://example.org/x", "noopener noreferrer")]
    assert page.driver.title == "laneserve"  # no handler ran
    page.screenshot(artefacts, "04-hostile-as-text")


RENDER = """
const [cases, done] = [arguments[0], arguments[arguments.length - 1]];
import('/ui/markdown.js').then(({renderMarkdown}) => done(cases.map((text) => {
  const box = document.createElement('div');
  box.append(renderMarkdown(text));
  return box.innerHTML;
})), (error) => done(String(error)));
"""


def test_the_renderer_builds_only_its_own_elements_from_hostile_markdown(page):
    page.open(wait_models=False)
    cases = {
        "<img src=x onerror=alert(1)>": "<p>&lt;img src=x onerror=alert(1)&gt;</p>",
        "<script>alert(1)</script>": "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>",
        "**b** *i* _j_ `<x>` snake_case_name": "<p><strong>b</strong> <em>i</em> <em>j</em> <code>&lt;x&gt;</code>"
                                               " snake_case_name</p>",
        "[a](https://x.org/?q=<b>)": '<p><a href="https://x.org/?q=%3Cb%3E" rel="noopener noreferrer" '
                                     'target="_blank">a</a></p>',
        "[a](javascript:alert(1))": "<p>[a](javascript:alert(1))</p>",
        "[a](data:text/html,<script>)": "<p>[a](data:text/html,&lt;script&gt;)</p>",
        "[a](/v1/models)": "<p>[a](/v1/models)</p>",
        '[<img src=x onerror=alert(1)>](http://h.org)': '<p><a href="http://h.org/" rel="noopener noreferrer" '
                                                       'target="_blank">&lt;img src=x onerror=alert(1)&gt;</a></p>',
        "```js onload=x\n</code><script>alert(1)</script>\n```": '<pre><code class="language-js">&lt;/code&gt;'
                                                                '&lt;script&gt;alert(1)&lt;/script&gt;</code></pre>',
        "```\nunclosed <b>": "<pre><code>unclosed &lt;b&gt;</code></pre>",
        "# T <i>\n- a\n- b\n  - c\n\n1. x\n2. y": "<h1>T &lt;i&gt;</h1><ul><li><p>a</p></li><li><p>b</p><ul><li><p>c"
                                                 "</p></li></ul></li></ul><ol><li><p>x</p></li><li><p>y</p></li></ol>",
        "> quoted\n> line\n\nnext": "<blockquote><p>quoted<br>line</p></blockquote><p>next</p>",
    }
    rendered = page.driver.execute_async_script(RENDER, list(cases))
    assert dict(zip(cases, rendered)) == cases


# --- other servers ----------------------------------------------------------------------------

def test_reasoning_shows_apart_from_the_answer(driver, think_server, artefacts):
    page = ChatPage(driver, think_server.base_url)
    page.driver.set_window_size(1200, 900)
    page.open()
    assert sorted(page.model_names()) == ["smollm2", "think"]
    page.choose_model("think")
    page.settings(temperature="0")  # the model's script is its greedy output
    page.send("What is the answer?")
    page.wait_done()
    answer = page.last_answer()
    reasoning = answer.find_element("css selector", ".reasoning")
    assert reasoning.is_displayed()
    assert reasoning.find_element("css selector", "summary").text == "Reasoning"
    assert reasoning.find_element("css selector", ".reasoning-text").get_attribute("textContent").strip() == \
        "Hmm, thinking"
    assert page.answer_text().strip() == "The answer is 42."
    reasoning.find_element("css selector", "summary").click()
    assert reasoning.find_element("css selector", ".reasoning-text").is_displayed()
    assert console_errors(page.driver) == []
    page.screenshot(artefacts, "05-reasoning")


def test_with_an_api_key_the_page_asks_for_it_then_works(driver, own_server, artefacts):
    srv = own_server("--api-key", KEY)
    srv.wait_ready()
    assert httpx.get(srv.base_url + "/v1/models").status_code == 401  # the API stays protected
    page = ChatPage(driver, srv.base_url)
    page.driver.set_window_size(1200, 900)
    page.open(wait_models=False)
    dialog = wait_for(lambda: page.find("#key-dialog").is_displayed() and page.find("#key-dialog"),
                      what="the API-key prompt")
    assert "needs an API key" in page.find("#key-reason").text
    page.screenshot(artefacts, "06-api-key-prompt")
    page.find("#key").send_keys("wrong-key")
    page.find("#key-save").click()
    wait_for(lambda: "refused" in page.find("#key-reason").text and dialog.is_displayed(), what="a second prompt")
    page.find("#key").send_keys(KEY)
    page.find("#key-save").click()
    wait_for(page.model_names, what="the model list")
    assert page.driver.execute_script("return localStorage.getItem('laneserve.apiKey')") == KEY
    page.settings(max_tokens="16")
    page.send("Hello!")
    page.wait_done()
    assert page.answer_text() and not page.last_answer().find_element("css selector", ".error").text
    errors = console_errors(page.driver)
    assert errors and all("401" in e for e in errors), errors  # the two refused model lists, nothing else


def test_conversations_list_select_delete_and_a_narrow_screen(page, artefacts):
    from selenium.webdriver.common.action_chains import ActionChains

    def conversation(n):
        return {"id": f"c{n}", "title": f"chat {n}", "model": "smollm2", "updated": n,
                "messages": [{"role": "user", "content": f"question {n}"},
                             {"role": "assistant", "content": f"answer **{n}**"}]}

    page.driver.set_window_size(390, 844)
    try:
        page.open({"laneserve.conversations": [conversation(2), conversation(1)]})
        assert page.driver.execute_script("return document.documentElement.scrollWidth <= innerWidth")
        sidebar = page.find("#sidebar")

        def drawer(open: bool) -> None:  # waits for the drawer's slide to end
            side = "left >= 0" if open else "right <= 0"
            wait_for(lambda: page.driver.execute_script(f"return arguments[0].getBoundingClientRect().{side}", sidebar),
                     what=f"the drawer's {side}")

        drawer(open=False)
        page.find("#toggle-sidebar").click()
        drawer(open=True)
        page.screenshot(artefacts, "07-narrow-drawer")
        assert [li.text.split("\n")[0] for li in page.find_all("#conversations li")] == ["chat 2", "chat 1"]
        page.find_all("#conversations .open")[1].click()
        assert page.find(".message.assistant .answer strong").text == "1"
        drawer(open=False)
        page.screenshot(artefacts, "08-narrow-conversation")
        page.find("#toggle-sidebar").click()
        drawer(open=True)
        # a click beside the drawer (right of the centre, which the drawer covers) closes it
        ActionChains(page.driver).move_to_element_with_offset(page.find("#messages"), 150, 0).click().perform()
        drawer(open=False)
        page.find("#toggle-sidebar").click()
        drawer(open=True)
        page.find_all("#conversations .delete")[1].click()
        assert page.find_all(".message") == []  # the open conversation went
        stored = page.driver.execute_script("return JSON.parse(localStorage.getItem('laneserve.conversations'))")
        assert [c["id"] for c in stored] == ["c2"]
        page.find("#toggle-sidebar").click()
        drawer(open=True)
        page.find("#new-chat").click()
        assert page.find_all(".message") == [] and page.find_all("#conversations li.current") == []
        assert console_errors(page.driver) == []
    finally:
        page.driver.set_window_size(1200, 900)


def test_missing_browser_skips_with_the_hint_or_fails_in_ci(monkeypatch):
    monkeypatch.setattr(browser, "missing", lambda: "chromium is not installed")
    monkeypatch.delenv("LANESERVE_TEST_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium chromium-driver"):
        browser.require()
    monkeypatch.setenv("LANESERVE_TEST_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="CI requires it"):
        browser.require()
