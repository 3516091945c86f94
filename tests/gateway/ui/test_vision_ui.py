"""The web chat page with images, in headless Chromium against the vision server of tests/gateway/conftest.py
(`g`: Gemma 3 270M with a random-weight gemma3 projector; `plain`: text only): an image attached with the file
picker is previewed, sent as an image_url part (the same greedy answer and prompt tokens as the openai client
sending that image), shown in the conversation and kept in it across a reload; a large picture is reduced before
it is stored; a corrupt file shows the server's error and is not sent again; no attach control for `plain`, and a
conversation with pictures goes on there without them (said in the status line)."""
from __future__ import annotations

import base64

import numpy as np
import openai
import pytest

from browser import ChatPage, console_errors, wait_for

from ..vision.pictures import QUESTION, noise_image, openai_image_message, png_bytes

pytestmark = pytest.mark.real_model
MAX_TOKENS = 8


@pytest.fixture
def vision_page(driver, vision_server):
    driver.set_window_size(1200, 900)
    page = ChatPage(driver, vision_server.base_url).open()
    assert sorted(page.model_names()) == ["g", "plain"]
    page.choose_model("g")
    page.settings(temperature="0", max_tokens=str(MAX_TOKENS))
    return page


def grainy_gradient(height: int, width: int) -> np.ndarray:
    """A picture whose PNG is megabytes (the grain) and whose reduced JPEG is small (the grain is fine)."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], -1)
    grain = np.random.default_rng(3).integers(-3, 4, (height, width, 3))
    return np.clip(base + grain, 0, 255).astype(np.uint8)


def stored_messages(page: ChatPage) -> list[dict]:
    return page.driver.execute_script(
        "return JSON.parse(localStorage.getItem('laneserve.conversations'))[0].messages")


def attach(page: ChatPage, path) -> None:
    before = len(page.find_all("#attachments img"))
    page.find("#attach-file").send_keys(str(path))
    wait_for(lambda: len(page.find_all("#attachments img")) == before + 1, what="the image's preview")


def test_an_attached_image_is_sent_answered_shown_and_kept(vision_page, vision_server, tmp_path, artefacts):
    page = vision_page
    assert page.find("#attach").is_displayed()
    picture = png_bytes(noise_image(4))
    (tmp_path / "picture.png").write_bytes(picture)
    attach(page, tmp_path / "picture.png")
    page.screenshot(artefacts, "09-image-attached")
    page.send(QUESTION)
    page.wait_done()
    assert page.find_all("#attachments img") == [] and not page.find("#attachments").is_displayed()
    [user, answer] = stored_messages(page)
    data_uri = "data:image/png;base64," + base64.b64encode(picture).decode()
    assert user["images"] == [data_uri] and user["content"] == QUESTION  # a small file goes as it is
    client = openai.OpenAI(base_url=vision_server.base_url + "/v1", api_key="x", timeout=120, max_retries=0)
    want = client.chat.completions.create(model="g", messages=openai_image_message(base64.b64encode(picture).decode()),
                                          temperature=0, max_tokens=MAX_TOKENS)
    assert answer["content"] == want.choices[0].message.content and not answer.get("error")
    record = vision_server.records(page.request_id())[0]
    assert record["prompt_tokens"] == want.usage.prompt_tokens  # the image's tokens were in the prompt
    shown = page.find(".message.user .images img")
    assert shown.get_attribute("src") == data_uri and shown.get_property("naturalWidth") == 84
    page.screenshot(artefacts, "10-image-answer")

    page.driver.refresh()  # the conversation comes back from localStorage, its picture with it
    wait_for(page.model_names, what="the model list")
    assert page.find(".message.user .images img").get_attribute("src") == data_uri
    assert page.find("#attach").is_displayed()  # the conversation's model, `g`, is selected again

    # A large picture is redrawn smaller (JPEG, longest side 1024 px) before it is sent and stored.
    (tmp_path / "big.png").write_bytes(png_bytes(grainy_gradient(1536, 1920)))
    assert (tmp_path / "big.png").stat().st_size > 1024 * 1024
    attach(page, tmp_path / "big.png")
    page.send("And this one?")
    page.wait_done()
    user, answer = stored_messages(page)[2:]
    assert user["images"][0].startswith("data:image/jpeg;base64,") and len(user["images"][0]) < 600 * 1024 * 4 // 3
    assert answer["content"] and not answer.get("error")
    assert page.find_all(".message.user .images img")[1].get_property("naturalWidth") == 1024

    page.choose_model("plain")  # a text-only model: no attach control, the conversation goes on without pictures
    assert not page.find("#attach").is_displayed() and page.find("#attach-file").get_property("disabled")
    page.send("Hello")
    page.wait_done()
    assert page.last_answer().find_element("css selector", ".error").text == ""
    assert page.find("#status").text == "plain does not take images: this conversation's pictures were left out."
    assert page.find("#status").is_displayed() and page.answer_text()
    page.choose_model("g")
    assert page.find("#attach").is_displayed()
    page.send("Thanks")  # the next message's status line starts empty
    page.wait_done()
    assert not page.find("#status").is_displayed()
    assert console_errors(page.driver) == []


def test_a_bad_image_shows_the_servers_error_and_is_not_sent_again(vision_page, tmp_path, artefacts):
    page = vision_page
    (tmp_path / "broken.png").write_bytes(b"not an image at all")
    attach(page, tmp_path / "broken.png")
    page.send("What is this?")
    page.wait_done()
    error = page.last_answer().find_element("css selector", ".error").text
    assert error == "messages[0].content[0]: the data is not a PNG, JPEG, WebP or GIF image", error
    page.screenshot(artefacts, "11-image-refused")
    page.send("Hello")  # the refused turn stays on screen but is not sent again
    page.wait_done()
    assert page.last_answer().find_element("css selector", ".error").text == ""
    assert stored_messages(page)[-1]["content"]


ADD_FILE = """
const [how, name, type] = arguments;
const data = new DataTransfer();
data.items.add(new File([new Uint8Array([137, 80, 78, 71])], name, { type }));
const target = document.getElementById(how === "paste" ? "prompt" : "composer");
const event = how === "paste" ? new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true })
                              : new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true });
return target.dispatchEvent(event);  // false: the page took the file (preventDefault)
"""


def test_paste_drop_remove_and_a_file_that_is_no_image(vision_page):
    page = vision_page
    assert not page.driver.execute_script(ADD_FILE, "paste", "pasted.png", "image/png")
    assert not page.driver.execute_script(ADD_FILE, "drop", "dropped.png", "image/png")
    wait_for(lambda: len(page.find_all("#attachments img")) == 2, what="two previews")
    page.find_all("#attachments .remove")[0].click()
    assert len(page.find_all("#attachments img")) == 1
    page.driver.execute_script(ADD_FILE, "drop", "notes.txt", "text/plain")
    wait_for(lambda: "“notes.txt” is not a PNG, JPEG, WebP or GIF image." in page.find("#status").text,
             what="the refusal")
    assert len(page.find_all("#attachments img")) == 1
    page.choose_model("plain")  # hiding the control drops what was attached
    assert page.find_all("#attachments img") == [] and not page.find("#attachments").is_displayed()
    assert page.driver.execute_script(ADD_FILE, "paste", "pasted.png", "image/png")  # no vision: not taken
    assert page.find_all("#attachments img") == []
