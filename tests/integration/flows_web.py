#!/usr/bin/python3
"""tests/integration/flows_web.py - drives hubble-lite's web page in
Debian's headless Chromium (python3-selenium + chromium-driver), for
flows_web.sh: opens URL, waits for the stream to be live, creates READY so
the shell sends traffic, waits for the rows and the service map's edges
(b -> a with both verdicts, a -> b forwarded), saves a screenshot, applies
the filter verdict=DROPPED through the form, checks that only the dropped
flows and their edge remain, saves another screenshot. Any JavaScript error
in the console fails it. Prints one "PASS:/FAIL:" line per check.

  flows_web.py URL READY_FILE SHOTS_DIR USER_DATA_DIR
"""
import json
import os
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

url, ready, shots, profile = sys.argv[1:5]
failed = 0


def check(what, ok, detail=""):
    global failed
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok or not detail else " (%s)" % (detail,)), flush=True)
    failed += not ok


def wait_for(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # the page is being redrawn
            pass
        time.sleep(0.2)  # sleep: the poll interval of a wait with a deadline
    return None


opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--window-size=1600,1000", "--user-data-dir=" + profile):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
# the driver's session start may time out on a busy machine: one more try
for attempt in (1, 2):
    try:
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        break
    except Exception as e:  # selenium's WebDriverException, a timeout
        print("chromium did not start (attempt %d): %s" % (attempt, str(e).splitlines()[0]),
              file=sys.stderr, flush=True)
        if attempt == 2:
            raise
        time.sleep(2)  # sleep: a pause before the one retry of a start that timed out
try:
    # a busy machine may time the first load out: one more try
    for attempt in (1, 2):
        try:
            driver.get(url)
            break
        except Exception as e:
            print("loading %s failed (attempt %d): %s" % (url, attempt, str(e).splitlines()[0]),
                  file=sys.stderr, flush=True)
            if attempt == 2:
                raise
            time.sleep(2)  # sleep: a pause before the one retry of a load that timed out
    check("the page loads with its title", driver.title == "fibril flows", driver.title)
    live = wait_for(lambda: driver.find_element(By.ID, "status").text == "live")
    check("the page's stream is live", bool(live), driver.find_element(By.ID, "status").text)

    # read in one script each (the page redraws the map as flows come:
    # element handles would go stale between two calls)
    def rows():
        return driver.execute_script(
            "return [...document.querySelectorAll('#flows tbody tr')].map(r => r.dataset.verdict)")

    def edges():
        return {(s, d): (v, int(n)) for s, d, v, n in driver.execute_script(
            "return [...document.querySelectorAll('#map path.edge')]"
            ".map(e => [e.dataset.src, e.dataset.dst, e.dataset.verdict, e.dataset.count])")}

    A, B = "pod:team/a", "pod:team/b"
    # what the ring already held (the page starts with the last 200 flows):
    # every one of them is a row, and the map drawn (its next two frames)
    held = json.load(urllib.request.urlopen(url.rsplit("/flows", 1)[0] + "/v1/flows?last=200",
                                            timeout=10))["flows"]
    check("the page shows the %d flows the ring held" % len(held),
          bool(wait_for(lambda: len(rows()) >= len(held))), (len(rows()), len(held)))
    driver.execute_async_script("const done = arguments[arguments.length - 1];"
                                "requestAnimationFrame(() => requestAnimationFrame(done));")
    base_rows, base_edges = rows(), edges()
    base_ba = base_edges.get((B, A), ("", 0))[1]
    base_ab = base_edges.get((A, B), ("", 0))[1]
    base_dropped = base_rows.count("DROPPED")
    open(ready, "w").close()
    ok = wait_for(lambda: rows().count("FORWARDED") >= base_rows.count("FORWARDED") + 7 and
                  rows().count("DROPPED") >= base_dropped + 3)
    check("the rows appear (7 forwarded, 3 dropped)", bool(ok), rows())
    ok = wait_for(lambda: edges().get((B, A), ("", 0))[0] == "MIXED" and edges().get((A, B), ("", 0))[0] == "FORWARDED")
    check("the map has the edges b -> a (both verdicts) and a -> b (forwarded)", bool(ok), edges())
    ok = wait_for(lambda: edges().get((B, A), ("", 0))[1] == base_ba + 9 and edges()[(A, B)][1] == base_ab + 1)
    check("the edge b -> a counts 9 more flows (5 UDP and the RST forwarded, 3 UDP dropped), a -> b 1 (the SYN)",
          bool(ok), (base_ba, base_ab, edges()))
    nodes = driver.execute_script(
        "return [...document.querySelectorAll('#map g.node')].map(n => n.dataset.id)")
    ns = driver.execute_script(
        "return [...document.querySelectorAll('#map g.ns')].map(n => n.dataset.ns)")
    check("the map has the pods as nodes in their namespace", A in nodes and B in nodes and "team" in ns,
          (nodes, ns))
    driver.save_screenshot(os.path.join(shots, "1-all-flows.png"))

    Select(driver.find_element(By.NAME, "verdict")).select_by_visible_text("DROPPED")
    driver.find_element(By.ID, "apply").click()
    ok = wait_for(lambda: rows() and set(rows()) == {"DROPPED"} and len(rows()) == base_dropped + 3 and
                  all(v == "DROPPED" for v, n in edges().values()) and
                  edges().get((B, A), ("", 0))[1] >= 3)
    check("filter verdict=DROPPED: only the dropped rows and edges", bool(ok), (rows(), edges()))
    check("the filter is kept in the page's address", "verdict=DROPPED" in driver.current_url, driver.current_url)
    driver.save_screenshot(os.path.join(shots, "2-dropped.png"))

    # (the browser's own favicon.ico request is not the page's doing)
    errors = [l for l in driver.get_log("browser") if l.get("level") == "SEVERE" and
              "favicon.ico" not in l.get("message", "")]
    check("no JavaScript error in the console", not errors, errors)

    driver.find_element(By.NAME, "more").send_keys("port=http")
    driver.find_element(By.ID, "apply").click()
    err = wait_for(lambda: driver.find_element(By.ID, "error").text)
    check("a bad filter is shown, naming it", bool(err) and "port" in err, err)
    driver.save_screenshot(os.path.join(shots, "3-bad-filter.png"))
except Exception as e:
    check("the browser session ran without an error", False, str(e).splitlines()[0] if str(e) else repr(e))
    driver.save_screenshot(os.path.join(shots, "error.png"))
finally:
    driver.quit()
sys.exit(1 if failed else 0)
