"""The chat page at `/`, in a real browser: Debian's headless Chromium driven by `selenium`.

- The page loads from the binary, shows the model's name, and with the temperature set to 0 in
  its settings, a typed message streams an answer equal to Chat Completions' greedy answer for
  the same conversation, twice in a row (the second turn carries the first); each answer shows
  its tokens/s.
- A reload keeps the conversation (localStorage).
- Stop, pressed mid-stream on a slow model (100M parameters, dummy weights), cancels the
  request: the server counts an abort and frees its slot (/metrics), and the page keeps the
  partial answer marked stopped.
- --no-ui leaves / a 404.
A screenshot of the page is kept as chat-page.png in the working directory.

Skips (exit 77) with a message where no browser or selenium is installed.
Usage: chat_page.py LOOM_BINARY SOURCE_DIR."""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request

import serve_util
from serve_util import check

LOOM, SRC = sys.argv[1], sys.argv[2]
CHATML = f"{SRC}/tests/data/templates/chatml/template.jinja"

try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    print("chat_page: skipped, selenium is not installed")
    sys.exit(77)
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not CHROMIUM or not DRIVER:
    print("chat_page: skipped, no chromium and chromedriver (Debian's chromium, chromium-driver)")
    sys.exit(77)


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,800"):
        o.add_argument(a)
    return webdriver.Chrome(options=o, service=webdriver.ChromeService(executable_path=DRIVER))


def wait(what, cond, secs=60):
    deadline = time.time() + secs
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise TimeoutError(what)


def metrics(s):
    return urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics", timeout=10).read().decode()


def metric(s, name, label=""):
    m = re.search(rf"^loom:{name}{{[^}}]*{label}[^}}]*}} (\S+)$", metrics(s), re.M)
    return float(m.group(1))


def set_field(d, id, value):
    el = d.find_element(By.ID, id)
    el.clear()
    el.send_keys(str(value))
    d.execute_script("arguments[0].dispatchEvent(new Event('change'))", el)


def answers(d):
    return d.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def ask(d, text):
    box = d.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def greedy(s, msgs, max_tokens):
    r = s.post("/v1/chat/completions", {"messages": msgs, "temperature": 0, "max_tokens": max_tokens})
    return r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"]


def conversation(d, s):
    """Two turns through the page, each equal to the API's greedy answer."""
    d.get(f"http://127.0.0.1:{s.port}/")
    wait("the model's name", lambda: d.find_element(By.ID, "model").text == "stories260K")
    d.find_element(By.ID, "toggle-settings").click()
    set_field(d, "temperature", 0)
    set_field(d, "max-tokens", 24)
    msgs = []
    for turn, text in enumerate(("Tell me about a robot", "And then?")):
        ask(d, text)
        msgs.append({"role": "user", "content": text})
        div = wait(f"answer {turn}", lambda: len(answers(d)) == turn + 1 and
                   answers(d)[turn].get_attribute("data-state") == "done" and answers(d)[turn])
        got = div.get_attribute("data-raw")
        want, _ = greedy(s, msgs, 24)
        check(got == want, f"turn {turn}: the page's answer {got!r} != the API's {want!r}")
        stats = div.find_element(By.CLASS_NAME, "stats").text
        check(re.fullmatch(r"\d+ tokens, [\d.]+ tokens/s", stats), f"turn {turn}: stats {stats!r}")
        check(div.find_element(By.CLASS_NAME, "content").text.strip(), f"turn {turn}: nothing rendered")
        msgs.append({"role": "assistant", "content": got})
    d.save_screenshot("chat-page.png")
    d.refresh()
    wait("the conversation after a reload", lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4)
    kept = [m.get_attribute("data-raw") for m in d.find_elements(By.CSS_SELECTOR, ".msg")]
    check(kept == [m["content"] for m in msgs], f"after a reload: {kept} != {msgs}")
    check(d.find_element(By.ID, "temperature").get_attribute("value") == "0", "the settings after a reload")


def markdown(d):
    """The renderer on a known text: code fences stay code, markup the model writes is text."""
    html = d.execute_script("return markdown(arguments[0])",
                            "# Title\n\nSome **bold** and `x < y`.\n\n```c\nint a = 1 < 2;\n```\n- one\n- two\n<b>no</b>")
    for part in ("<h1>Title</h1>", "<strong>bold</strong>", "<code>x &lt; y</code>",
                 '<pre><code class="language-c">int a = 1 &lt; 2;</code></pre>', "<ul><li>one</li><li>two</li></ul>",
                 "&lt;b&gt;no&lt;/b&gt;"):
        check(part in html, f"markdown: {part!r} not in {html!r}")


def stop_button(d, s):
    d.execute_script("localStorage.clear()")
    d.get(f"http://127.0.0.1:{s.port}/")
    d.find_element(By.ID, "toggle-settings").click()
    set_field(d, "temperature", 0)
    set_field(d, "max-tokens", 400)
    # greedy output of the dummy weights does not end by itself within 400 tokens
    check(greedy(s, [{"role": "user", "content": "Tell me a story"}], 400)[1] == "length",
          "the slow model's greedy answer ends early: the stop test would race it")
    aborted = metric(s, "request_success_total", 'finished_reason="abort"')
    ask(d, "Tell me a story")
    wait("the first tokens", lambda: answers(d) and answers(d)[0].get_attribute("data-raw"))
    check(metric(s, "num_requests_running") == 1, "no request running while the page streams")
    d.find_element(By.ID, "stop").click()
    div = wait("the stopped answer", lambda: answers(d)[0].get_attribute("data-state") == "stopped" and answers(d)[0])
    wait("the slot freed", lambda: metric(s, "num_requests_running") == 0, 10)
    check(metric(s, "request_success_total", 'finished_reason="abort"') == aborted + 1, "the server counted no abort")
    check(div.find_element(By.CLASS_NAME, "stats").text == "stopped" and div.get_attribute("data-raw"),
          "the partial answer is not kept, marked stopped")


def main():
    d = browser()
    try:
        s = serve_util.LoomServer(LOOM, "chat-page", "--chat-template", CHATML)
        try:
            conversation(d, s)
            markdown(d)
        finally:
            s.stop()
        with tempfile.TemporaryDirectory() as slow:
            with open(f"{SRC}/configs/llama-100m.json") as f:
                config = json.load(f) | {"vocab_size": 512}  # stories260K's tokenizer
            with open(f"{slow}/config.json", "w") as f:
                json.dump(config, f)
            shutil.copy(f"{SRC}/models/stories260K/tokenizer.json", slow)
            s = serve_util.LoomServer(LOOM, "chat-page-slow", "-m", slow, "--load-format", "dummy",
                                      "--served-model-name", "slow", "--chat-template", CHATML)
            try:
                stop_button(d, s)
            finally:
                s.stop()
    finally:
        d.quit()
    s = serve_util.LoomServer(LOOM, "chat-page-off", "--no-ui")
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{s.port}/", timeout=10)
        check(False, "--no-ui still serves /")
    except urllib.error.HTTPError as e:
        check(e.code == 404, f"--no-ui: / answered {e.code}")
    finally:
        s.stop()
    print(f"chat_page: {'ok' if not serve_util.failures else f'{serve_util.failures} failed'}")
    sys.exit(1 if serve_util.failures else 0)


main()
