#!/usr/bin/env bash
# Does the built documentation render its equations with no network?  Opens pages of the site
# from disk (file://) in headless Chromium with every host name unresolvable, lets MathJax run,
# and checks the DOM it leaves: every arithmatex span or div typeset (an <mjx-container>), no
# raw TeX (\( or \[) left, no MathJax error (an undefined macro, a failed extension load).
#
#   docs/check_offline.sh [SITE_DIR [PAGE ...]]
#
# SITE_DIR: a built site (default: build one into a temporary folder, strictly, as `make docs`
# does).  PAGE: paths inside it (default: every page with an equation).  SCREENSHOT=file.png
# also saves a screenshot of the first page.  Needs chromium (Debian: apt-get install chromium)
# and python3.  Exit status 1 if a page fails, 2 if the check cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
    echo "check_offline: needs chromium (Debian: apt-get install -y chromium)" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

site=${1:-}
if [[ -z "$site" ]]; then
    site="$work/site"
    NO_MKDOCS_2_WARNING=1 "${PYTHON:-.venv/bin/python}" -m mkdocs build --strict --quiet \
        -d "$site"
fi
site=$(realpath "$site")
shift || true
if [[ $# -gt 0 ]]; then
    pages=("$@")
else
    mapfile -t pages < <(cd "$site" && grep -rl --include=index.html 'class="arithmatex"' . \
                         | sed 's|^\./||' | sort)
fi
if [[ ${#pages[@]} -eq 0 ]]; then
    echo "check_offline: no page of $site holds an equation" >&2
    exit 2
fi

# --host-resolver-rules: no host name resolves, so any fetch from a server fails (offline).
# --virtual-time-budget: run the page's scripts (MathJax) for up to 10 s of virtual time.
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run
       --host-resolver-rules="MAP * ~NOTFOUND" --virtual-time-budget=10000)
status=0
for page in "${pages[@]}"; do
    "$browser" "${flags[@]}" --user-data-dir="$work/profile" --dump-dom \
        "file://$site/$page" > "$work/dom.html" 2> "$work/browser.log" || true
    python3 - "$work/dom.html" "$page" <<'EOF' || status=1
import html.parser
import sys

path, page = sys.argv[1:]


class Count(html.parser.HTMLParser):
    """Math elements, typeset ones, MathJax errors and raw TeX left in the math elements."""

    def __init__(self):
        super().__init__()
        self.math = self.typeset = self.errors = 0
        self.raw = []
        self.depth = 0  # inside an arithmatex element that MathJax left untouched

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "arithmatex" in (attrs.get("class") or "").split():
            self.math += 1
            self.depth = 1
        elif self.depth:
            self.depth += 1
        if tag == "mjx-container":
            self.typeset += 1
            self.depth = 0
        if "data-mjx-error" in attrs or tag == "mjx-merror":
            self.errors += 1

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and ("\\(" in data or "\\[" in data):
            self.raw.append(data.strip()[:60])


count = Count()
count.feed(open(path, encoding="utf-8").read())
ok = count.math > 0 and count.typeset >= count.math and not count.raw and not count.errors
print(f"{'ok  ' if ok else 'FAIL'} {page}: {count.typeset} typeset of {count.math} equations,"
      f" {count.errors} MathJax errors, raw TeX left: {count.raw[:3] or 'none'}")
sys.exit(0 if ok else 1)
EOF
done
if [[ -n "${SCREENSHOT:-}" ]]; then
    "$browser" "${flags[@]}" --user-data-dir="$work/profile" --window-size=1280,1400 \
        --screenshot="$(realpath -m "$SCREENSHOT")" "file://$site/${pages[0]}" 2> /dev/null
    echo "screenshot of ${pages[0]}: $SCREENSHOT"
fi
exit $status
