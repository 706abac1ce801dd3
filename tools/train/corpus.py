"""Training corpus for the default model: Debian-shipped prose plus generated
chat dialogues in deepinfer's DeepSeek-V4 prompt format.

Owns: collecting English prose that Debian packages ship on this machine
(/usr/share/doc READMEs and text, /usr/share/common-licenses, man pages
stripped of roff, package descriptions from /var/lib/dpkg/status) and the
dialogue generators (package questions, command explanations, DSML tool calls
for tools declared in the prompt, JSON answers), rendered exactly as
src/recipe/render_deepseek_v4.c renders a conversation with thinking off.

Why shaped so: nothing can be downloaded, so the text is what the OS ships;
everything is sorted and drawn from seeded RNGs, so the same seed gives the
same corpus on the same package set. Held-out dialogues come from the same
generators with another seed (tools.train.evaluate uses them).
"""

import glob
import gzip
import hashlib
import json
import os
import random
import re

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
D = "｜DSML｜"

# The "## Tools" section, byte for byte as render_deepseek_v4.c writes it.
TOOLS_INTRO = (
    "## Tools\n\nYou can call the tools below. To call tools, write one block like this in "
    "your reply:\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"TOOL_NAME\">\n<" + D
    + "parameter name=\"PARAMETER_NAME\" string=\"true|false\">VALUE</" + D + "parameter>\n</" + D
    + "invoke>\n</" + D + "tool_calls>\n\nWrite one invoke per call and one parameter per "
    "argument. Set string=\"true\" when VALUE is a plain string, written as is; set "
    "string=\"false\" when VALUE is JSON (a number, boolean, null, array or object). Tool results "
    "come back in a <" + D + "tool_results> block.\n\n<functions>"
)

# --------------------------------------------------------------------------
# prose


def _read(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read(400_000)
        else:
            with open(path, "rb") as f:
                raw = f.read(400_000)
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


_ROFF_ESC = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\s[+-]?\d"), ""),
    (re.compile(r"\\\(em|\\\(en"), "-"),
    (re.compile(r"\\\(lq|\\\(rq|\\\(dq"), '"'),
    (re.compile(r"\\\(aq|\\\(oq|\\\(cq"), "'"),
    (re.compile(r"\\\(bu"), "*"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[e\\]"), "\\\\"),
    (re.compile(r"\\[&|^]"), ""),
    (re.compile(r"\\[0~ ]"), " "),
    (re.compile(r"\\\*\(..|\\\*\[[^\]]*\]|\\\*."), ""),
    (re.compile(r'\\".*'), ""),
    (re.compile(r"\\n\(..|\\n\[[^\]]*\]|\\n."), ""),
    (re.compile(r"\\."), ""),
]


def roff_to_text(src):
    """A rough man page to text: macro lines become headings or their
    arguments, escapes are dropped. Good enough for language statistics."""
    out = []
    for line in src.split("\n"):
        if line.startswith(".\\\"") or line.startswith("'\\\"") or line.startswith("'"):
            continue
        if line.startswith("."):
            m = re.match(r"\.(\w+)\s*(.*)", line)
            if not m:
                continue
            mac, arg = m.group(1), m.group(2)
            if mac in ("SH", "SS"):
                out.append("")
                out.append(arg.strip('"').upper() if mac == "SH" else arg.strip('"'))
            elif mac in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB"):
                out.append(" ".join(p.strip('"') for p in re.findall(r'"[^"]*"|\S+', arg)) if mac in ("B", "I", "SM", "SB")
                           else "".join(p.strip('"') for p in re.findall(r'"[^"]*"|\S+', arg)))
            elif mac in ("PP", "P", "LP", "TP", "IP", "sp", "br"):
                out.append("")
                if mac == "IP" and arg:
                    out.append(arg.split()[0].strip('"'))
            continue
        out.append(line)
    text = "\n".join(out)
    for rx, rep in _ROFF_ESC:
        text = rx.sub(rep, text)
    return text


def _paragraphs(text):
    for p in re.split(r"\n\s*\n", text):
        p = "\n".join(ln.rstrip() for ln in p.strip("\n").split("\n"))
        if p.strip():
            yield p


def _clean_doc(text, seen):
    """Drops duplicate paragraphs (licenses repeat in every copyright file),
    mostly non-letter paragraphs and non-ASCII-heavy ones."""
    keep = []
    for p in _paragraphs(text):
        if len(p) < 20:
            if keep and len(p.strip()) > 0 and p.strip()[0].isalpha():
                keep.append(p)
            continue
        h = hashlib.sha1(re.sub(r"\s+", " ", p).encode()).digest()[:8]
        if h in seen:
            continue
        seen.add(h)
        letters = sum(c.isalpha() or c == " " for c in p)
        if letters < 0.7 * len(p) or sum(ord(c) > 127 for c in p) > 0.02 * len(p):
            continue
        keep.append(p)
    return "\n\n".join(keep)


def _pick(paths, frac_key, cap_files, seed):
    """A deterministic subset: sorted, then ordered by a keyed hash."""
    paths = sorted(set(paths))
    paths.sort(key=lambda p: hashlib.sha1(f"{seed}:{frac_key}:{p}".encode()).hexdigest())
    return paths[:cap_files]


def dpkg_packages(path="/var/lib/dpkg/status"):
    """[(name, version, section, short description, long description)] sorted by name."""
    out = []
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return out
    for block in text.split("\n\n"):
        f, cur = {}, None
        for line in block.split("\n"):
            if line.startswith(" ") and cur:
                f[cur] += "\n" + line
            elif ":" in line:
                cur, _, v = line.partition(":")
                f[cur] = v.strip()
        if "Package" not in f or "Description" not in f:
            continue
        desc = f["Description"].split("\n")
        short = desc[0].strip()
        long_lines = []
        for ln in desc[1:]:
            ln = ln[1:] if ln.startswith(" ") else ln
            long_lines.append("" if ln.strip() == "." else ln)
        long = "\n".join(long_lines).strip()
        out.append((f["Package"], f.get("Version", ""), f.get("Section", "misc"), short, long))
    out.sort()
    return out


def man_summaries(paths):
    """{command: (one-line NAME summary, first DESCRIPTION paragraph)} from man pages."""
    out = {}
    for p in paths:
        src = _read(p)
        if not src:
            continue
        txt = roff_to_text(src)
        m = re.search(r"\nNAME\n+(.+?)\n\n", txt, re.S)
        d = re.search(r"\nDESCRIPTION\n+(.+?)\n\n", txt, re.S)
        if not m or not d:
            continue
        name_line = re.sub(r"\s+", " ", m.group(1)).strip()
        mm = re.match(r"([\w.+-]+)(?:,.*?)?\s+-+\s+(.+)", name_line)
        if not mm:
            continue
        desc = re.sub(r"\s+", " ", d.group(1)).strip()
        if 40 <= len(desc) <= 600 and all(ord(c) < 128 for c in desc):
            out.setdefault(mm.group(1), (mm.group(2).rstrip("."), desc))
    return out


def prose_docs(seed=0, max_bytes=6_000_000):
    """Deterministic list of prose documents (strings)."""
    seen = set()
    docs = []
    total = 0

    def add(text):
        nonlocal total
        t = _clean_doc(text, seen)
        if len(t) > 200:
            docs.append(t)
            total += len(t)

    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p) and not os.path.islink(p):
            t = _read(p)
            if t:
                add(t)
    for name, ver, sec, short, long in dpkg_packages():
        if long:
            add(f"{name} - {short}\n\n{long}")
    doc_paths = []
    for pat in ("README*", "*.txt", "*.txt.gz", "*.md", "*.md.gz", "*.rst", "NEWS*", "FAQ*", "copyright"):
        doc_paths += glob.glob(f"/usr/share/doc/**/{pat}", recursive=True)
    doc_paths = [p for p in doc_paths if os.path.isfile(p) and "changelog" not in p.lower()]
    for p in _pick(doc_paths, "doc", 3000, seed):
        if total > max_bytes * 0.55:
            break
        t = _read(p)
        if t:
            add(t)
    man_paths = []
    for sec in ("1", "5", "7", "8"):
        man_paths += glob.glob(f"/usr/share/man/man{sec}/*.gz")
    for p in _pick(man_paths, "man", 4000, seed):
        if total > max_bytes:
            break
        t = _read(p)
        if t:
            add(roff_to_text(t))
    return docs


def corpus_words(docs, min_count=3):
    """Lower-case alphabetic words seen at least min_count times: the
    dictionary the generation test checks against."""
    cnt = {}
    for d in docs:
        for w in re.findall(r"[A-Za-z]+", d):
            w = w.lower()
            cnt[w] = cnt.get(w, 0) + 1
    return sorted(w for w, c in cnt.items() if c >= min_count)


# --------------------------------------------------------------------------
# tools and dialogues


def _p(t, desc, **kw):
    d = {"type": t, "description": desc}
    d.update(kw)
    return d


TOOLS = [
    {"name": "get_weather", "description": "Get the current weather for a city.",
     "parameters": {"type": "object", "properties": {
         "city": _p("string", "City name"),
         "unit": _p("string", "Temperature unit", enum=["celsius", "fahrenheit"])}, "required": ["city"]}},
    {"name": "search_docs", "description": "Search the local documentation.",
     "parameters": {"type": "object", "properties": {
         "query": _p("string", "Search terms"),
         "max_results": _p("integer", "How many results to return")}, "required": ["query"]}},
    {"name": "get_package_info", "description": "Look up a Debian package.",
     "parameters": {"type": "object", "properties": {
         "name": _p("string", "Package name")}, "required": ["name"]}},
    {"name": "send_email", "description": "Send an email message.",
     "parameters": {"type": "object", "properties": {
         "to": _p("string", "Recipient address"),
         "subject": _p("string", "Subject line"),
         "body": _p("string", "Message text")}, "required": ["to", "subject", "body"]}},
    {"name": "set_timer", "description": "Start a countdown timer.",
     "parameters": {"type": "object", "properties": {
         "minutes": _p("integer", "Length in minutes"),
         "label": _p("string", "What the timer is for")}, "required": ["minutes"]}},
    {"name": "convert_units", "description": "Convert a value between units.",
     "parameters": {"type": "object", "properties": {
         "value": _p("number", "The amount"),
         "from_unit": _p("string", "Unit of the value"),
         "to_unit": _p("string", "Unit to convert to")}, "required": ["value", "from_unit", "to_unit"]}},
    {"name": "lookup_word", "description": "Look up the meaning of an English word.",
     "parameters": {"type": "object", "properties": {
         "word": _p("string", "The word")}, "required": ["word"]}},
    {"name": "run_command", "description": "Run a shell command and return its output.",
     "parameters": {"type": "object", "properties": {
         "command": _p("string", "The command line"),
         "timeout": _p("integer", "Seconds before it is stopped")}, "required": ["command"]}},
    {"name": "list_files", "description": "List the files in a directory.",
     "parameters": {"type": "object", "properties": {
         "path": _p("string", "Directory path"),
         "recursive": _p("boolean", "Include subdirectories")}, "required": ["path"]}},
    {"name": "translate", "description": "Translate text into another language.",
     "parameters": {"type": "object", "properties": {
         "text": _p("string", "Text to translate"),
         "target_language": _p("string", "Language to translate into")}, "required": ["text", "target_language"]}},
    {"name": "calculate", "description": "Evaluate an arithmetic expression.",
     "parameters": {"type": "object", "properties": {
         "expression": _p("string", "The expression")}, "required": ["expression"]}},
    {"name": "create_event", "description": "Add an event to the calendar.",
     "parameters": {"type": "object", "properties": {
         "title": _p("string", "Event title"),
         "date": _p("string", "Date as YYYY-MM-DD"),
         "attendees": {"type": "array", "items": {"type": "string"}, "description": "People to invite"}},
         "required": ["title", "date"]}},
]
TOOL_BY_NAME = {t["name"]: t for t in TOOLS}

CITIES = ["Paris", "London", "Berlin", "Tokyo", "Madrid", "Rome", "Oslo", "Cairo", "Lima", "Boston", "Denver",
          "Sydney", "Toronto", "Vienna", "Prague", "Dublin", "Lisbon", "Athens", "Seoul", "Delhi", "Nairobi",
          "Chicago", "Austin", "Munich", "Zurich", "Helsinki", "Warsaw", "Montreal", "Quito", "Hanoi",
          "Bangkok", "Manila", "Jakarta", "Istanbul", "Kyoto", "Osaka", "Geneva", "Brussels", "Amsterdam",
          "Stockholm", "Copenhagen", "Budapest", "Bogota", "Santiago", "Havana", "Dakar", "Accra", "Lagos"]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar",
         "peggy", "trent", "victor", "walter", "nina", "omar", "priya", "yuki", "lena", "marco", "sara", "tom"]
DOMAINS = ["example.com", "example.org", "mail.test", "corp.example"]
LANGS = ["French", "German", "Spanish", "Italian", "Japanese", "Portuguese", "Dutch", "Swedish", "Polish"]
UNITS = [("km", "miles"), ("miles", "km"), ("kg", "pounds"), ("pounds", "kg"), ("celsius", "fahrenheit"),
         ("liters", "gallons"), ("meters", "feet"), ("feet", "meters"), ("inches", "cm"), ("grams", "ounces")]
DIRS = ["/etc", "/usr/share/doc", "/var/log", "/home", "/tmp", "/usr/bin", "/srv/data", "/opt", "/usr/lib",
        "/var/cache/apt", "/etc/systemd", "/usr/share/man"]
COMMANDS = ["ls -l", "df -h", "uptime", "free -m", "uname -a", "du -sh .", "date", "whoami", "ps aux",
            "cat /etc/hostname", "ip addr", "lsblk", "who", "env", "id"]
SUBJECTS = ["meeting", "report", "lunch", "the release", "budget", "holiday plans", "server outage", "weekly update",
            "project status", "new hire", "invoice", "travel"]
LABELS = ["tea", "pasta", "break", "laundry", "meeting", "bread", "workout", "call", "eggs", "nap"]
EVENTS = ["Team sync", "Dentist", "Code review", "Birthday party", "Planning", "Release review", "Lunch with Sam",
          "Book club", "Yoga class", "Standup"]


def _email(r):
    return f"{r.choice(NAMES)}@{r.choice(DOMAINS)}"


def _date(r):
    return f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"


def tool_request(r, tool, words, pkgs):
    """(user text, arguments dict in schema order) for one call of `tool`."""
    n = tool
    if n == "get_weather":
        c = r.choice(CITIES)
        if r.random() < 0.5:
            u = r.choice(["celsius", "fahrenheit"])
            return r.choice([f"What is the weather in {c} in {u}?", f"How warm is it in {c}? Use {u}.",
                             f"Tell me the weather for {c}, in {u} please."]), {"city": c, "unit": u}
        return r.choice([f"What's the weather like in {c}?", f"Is it raining in {c} right now?",
                         f"Weather in {c} today?", f"How cold is it in {c}?"]), {"city": c}
    if n == "search_docs":
        q = " ".join(r.sample(words, r.randint(1, 3)))
        if r.random() < 0.4:
            k = r.randint(1, 10)
            return r.choice([f"Find {k} documents about {q}.", f"Search the docs for {q} and show {k} results."]), \
                {"query": q, "max_results": k}
        return r.choice([f"Search the documentation for {q}.", f"Look in the docs for {q}.",
                         f"Can you find documentation about {q}?"]), {"query": q}
    if n == "get_package_info":
        p = r.choice(pkgs)
        return r.choice([f"Look up the package {p}.", f"What version of {p} is installed?",
                         f"Get information about the Debian package {p}.", f"Is {p} installed?"]), {"name": p}
    if n == "send_email":
        to, s = _email(r), r.choice(SUBJECTS)
        body = r.choice(["See you tomorrow.", "The file is attached.", "Thanks for your help.",
                         "Can we talk at noon?", "I will be late today.", "Please review the draft."])
        return r.choice([f"Send an email to {to} about {s} saying: {body}",
                         f"Email {to} with the subject {s} and the text: {body}",
                         f"Write to {to}, subject {s}: {body}"]), {"to": to, "subject": s, "body": body}
    if n == "set_timer":
        m = r.randint(1, 90)
        if r.random() < 0.5:
            lab = r.choice(LABELS)
            return r.choice([f"Set a timer for {m} minutes for the {lab}.", f"Start a {m} minute timer for {lab}."]), \
                {"minutes": m, "label": lab}
        return r.choice([f"Set a timer for {m} minutes.", f"Remind me in {m} minutes.",
                         f"Start a {m} minute timer."]), {"minutes": m}
    if n == "convert_units":
        a, b = r.choice(UNITS)
        v = r.choice([r.randint(1, 500), round(r.uniform(0.5, 200), 1)])
        return r.choice([f"Convert {v} {a} to {b}.", f"How many {b} is {v} {a}?",
                         f"What is {v} {a} in {b}?"]), {"value": v, "from_unit": a, "to_unit": b}
    if n == "lookup_word":
        w = r.choice(words)
        return r.choice([f"What does the word {w} mean?", f"Define {w}.", f"Look up the word {w}."]), {"word": w}
    if n == "run_command":
        c = r.choice(COMMANDS)
        if r.random() < 0.3:
            t = r.choice([5, 10, 30, 60])
            return f"Run {c} with a timeout of {t} seconds.", {"command": c, "timeout": t}
        return r.choice([f"Run the command {c}.", f"Please execute {c} and show me the output.",
                         f"What does {c} print on this machine?"]), {"command": c}
    if n == "list_files":
        p = r.choice(DIRS)
        if r.random() < 0.5:
            rec = r.random() < 0.5
            return (f"List all files under {p}, including subdirectories." if rec else
                    f"List the files in {p}, without subdirectories."), {"path": p, "recursive": rec}
        return r.choice([f"What files are in {p}?", f"Show me the contents of {p}.", f"List {p}."]), {"path": p}
    if n == "translate":
        t = r.choice(["good morning", "thank you very much", "where is the station", "the file is missing",
                      "see you soon", "how much does it cost", "the server is down", "open the door"])
        lang = r.choice(LANGS)
        return r.choice([f"Translate \"{t}\" into {lang}.", f"How do you say \"{t}\" in {lang}?"]), \
            {"text": t, "target_language": lang}
    if n == "calculate":
        a, b, op = r.randint(2, 999), r.randint(2, 999), r.choice(["+", "-", "*", "/"])
        e = f"{a} {op} {b}"
        return r.choice([f"Calculate {e}.", f"What is {e}?", f"Compute {e} for me."]), {"expression": e}
    if n == "create_event":
        t, d = r.choice(EVENTS), _date(r)
        if r.random() < 0.5:
            ppl = r.sample(NAMES, r.randint(1, 3))
            return f"Add {t} on {d} to my calendar and invite {', '.join(ppl)}.", \
                {"title": t, "date": d, "attendees": ppl}
        return r.choice([f"Put {t} on my calendar for {d}.", f"Create an event {t} on {d}."]), {"title": t, "date": d}
    raise ValueError(n)


def jdump(v):
    """JSON the way render_util.c's rjson_value writes it (", " and ": ")."""
    return json.dumps(v, ensure_ascii=False)


def tools_section(tools):
    lines = [TOOLS_INTRO]
    for t in tools:
        lines.append("\n" + jdump({"name": t["name"], "description": t["description"], "parameters": t["parameters"]}))
    lines.append("\n</functions>")
    return "".join(lines)


def dsml_block(calls):
    s = "<" + D + "tool_calls>\n"
    for name, args in calls:
        s += "<" + D + f"invoke name=\"{name}\">\n"
        for k, v in args.items():
            if isinstance(v, str):
                s += "<" + D + f"parameter name=\"{k}\" string=\"true\">{v}</" + D + "parameter>\n"
            else:
                s += "<" + D + f"parameter name=\"{k}\" string=\"false\">{jdump(v)}</" + D + "parameter>\n"
        s += "</" + D + "invoke>\n"
    return s + "</" + D + "tool_calls>"


def render(system, tools, turns):
    """The V4 prompt, thinking off. turns: [("user", text) | ("assistant",
    text) | ("tool", (call_id, text))]. Returns (prompt, completion-start
    offsets of each assistant turn) -- the text after <｜Assistant｜></think>."""
    s = BOS
    if system:
        s += system
    if tools:
        if system:
            s += "\n\n"
        s += tools_section(tools)
    starts = []
    for i, (role, x) in enumerate(turns):
        if role == "user":
            s += USER + x + ASSISTANT + "</think>"
        elif role == "tool":
            prev = turns[i - 1][0] if i else None
            if prev != "tool":
                s += USER + "<" + D + "tool_results>"
            s += "\n<" + D + f"result tool_call_id=\"{x[0]}\">{x[1]}</" + D + "result>"
            if i + 1 == len(turns) or turns[i + 1][0] != "tool":
                s += "\n</" + D + "tool_results>" + ASSISTANT + "</think>"
        else:
            starts.append(len(s))
            s += x + EOS
    return s, starts


SYSTEMS = ["", "", "You are a helpful assistant.", "You are a concise assistant running on a Debian system.",
           "Answer briefly."]


def _tool_result(r, name, args):
    if name == "get_weather":
        u = args.get("unit", "celsius")
        t = r.randint(-5, 35) if u == "celsius" else r.randint(20, 95)
        return {"city": args["city"], "temperature": t, "unit": u, "sky": r.choice(["clear", "cloudy", "rain"])}, \
            f"It is {t} degrees {u} in {args['city']}."
    if name == "calculate":
        try:
            v = eval(args["expression"])  # noqa: S307 - our own generated a op b
        except ZeroDivisionError:
            v = 0
        v = round(v, 3) if isinstance(v, float) else v
        return {"result": v}, f"{args['expression']} = {v}."
    if name == "set_timer":
        return {"ok": True}, f"The timer is set for {args['minutes']} minutes."
    if name == "send_email":
        return {"sent": True}, f"I sent the email to {args['to']}."
    if name == "create_event":
        return {"created": True}, f"{args['title']} is on your calendar for {args['date']}."
    return {"ok": True}, "Done."


def dialogue_tool(r, words, pkgs):
    target = r.choice(TOOLS)
    others = [t for t in TOOLS if t is not target]
    tools = r.sample(others, r.randint(0, 2)) + [target]
    r.shuffle(tools)
    user, args = tool_request(r, target["name"], words, pkgs)
    turns = [("user", user), ("assistant", dsml_block([(target["name"], args)]))]
    if r.random() < 0.35:
        res, answer = _tool_result(r, target["name"], args)
        turns += [("tool", ("call_1", jdump(res))), ("assistant", answer)]
    return r.choice(SYSTEMS), tools, turns


def json_request(r, words, pkgs_full):
    """(user text, answer value)."""
    k = r.randint(0, 4)
    if k == 0:
        name, ver, sec, short, _ = r.choice(pkgs_full)
        return r.choice([f"Give me a JSON object with the name, version and section of the package {name}.",
                         f"Return JSON with the name, version and section of {name}.",
                         f"Describe the package {name} as JSON with the keys name, version and section."]), \
            {"name": name, "version": ver, "section": sec}
    if k == 1:
        nm, age, c = r.choice(NAMES).capitalize(), r.randint(18, 80), r.choice(CITIES)
        return r.choice([f"Convert to JSON: name {nm}, age {age}, city {c}.",
                         f"Write this as a JSON object: {nm} is {age} years old and lives in {c}.",
                         f"Reply in JSON only. Name: {nm}. Age: {age}. City: {c}."]), {"name": nm, "age": age, "city": c}
    if k == 2:
        ws = r.sample(words, r.randint(2, 5))
        return r.choice([f"Put these words in a JSON array: {', '.join(ws)}.",
                         f"Return a JSON list of the words {' '.join(ws)}."]), ws
    if k == 3:
        c = r.choice(CITIES)
        t = r.randint(-5, 35)
        return r.choice([f"Output JSON with the fields city and temperature for {c} at {t} degrees.",
                         f"As JSON: the temperature in {c} is {t}."]), {"city": c, "temperature": t}
    a, b = r.randint(1, 99), r.randint(1, 99)
    return r.choice([f"Give the sum of {a} and {b} as JSON with the keys a, b and sum.",
                     f"Answer in JSON: what is {a} plus {b}? Use the keys a, b and sum."]), {"a": a, "b": b, "sum": a + b}


def dialogue_json(r, words, pkgs_full):
    user, val = json_request(r, words, pkgs_full)
    ans = jdump(val)
    if r.random() < 0.3:
        ans = "```json\n" + ans + "\n```"
    return r.choice(SYSTEMS), [], [("user", user), ("assistant", ans)]


def dialogue_package(r, pkgs_full):
    name, ver, sec, short, long = r.choice(pkgs_full)
    first = long.split("\n\n")[0].replace("\n", " ").strip() if long else ""
    user = r.choice([f"What is the package {name}?", f"What does {name} do?", f"Tell me about {name}.",
                     f"What is {name} for?"])
    ans = f"{name} is a Debian package: {short[0].lower() + short[1:] if short else ''}."
    if first:
        ans += " " + first
    return r.choice(SYSTEMS), [], [("user", user), ("assistant", ans)]


def dialogue_command(r, mans):
    cmd = r.choice(sorted(mans))
    summ, desc = mans[cmd]
    user = r.choice([f"What does the {cmd} command do?", f"Explain {cmd}.", f"How do I use {cmd}?",
                     f"What is {cmd}?"])
    ans = f"{cmd} - {summ}. {desc}"
    return r.choice(SYSTEMS), [], [("user", user), ("assistant", ans)]


GREET = [("Hello!", "Hello! How can I help you today?"), ("Hi there.", "Hi! What can I do for you?"),
         ("Thank you.", "You are welcome."), ("Who are you?", "I am a small language model trained on the "
          "documentation that ships with Debian. I can answer questions, call tools and write JSON."),
         ("What can you do?", "I can explain commands and packages, call the tools you declare, and answer in JSON.")]


def dialogue_greet(r):
    u, a = r.choice(GREET)
    return r.choice(SYSTEMS), [], [("user", u), ("assistant", a)]


class Generators:
    """Dialogue sources sharing the vocabulary lists; mix = kind weights."""

    MIX = [("tool", 0.42), ("json", 0.25), ("package", 0.15), ("command", 0.13), ("greet", 0.05)]

    def __init__(self, docs, words):
        self.pkgs_full = [p for p in dpkg_packages() if p[3]]
        self.pkgs = [p[0] for p in self.pkgs_full]
        common = [w for w in words if 4 <= len(w) <= 10]
        self.words = common[:: max(1, len(common) // 3000)] if common else ["file"]
        man_paths = sorted(glob.glob("/usr/share/man/man1/*.gz") + glob.glob("/usr/share/man/man8/*.gz"))
        man_paths = _pick(man_paths, "mansum", 1500, 0)
        self.mans = man_summaries(man_paths) or {"ls": ("list directory contents", "List information about files.")}

    def one(self, r, kind=None):
        if kind is None:
            x, acc = r.random(), 0.0
            for kind, w in self.MIX:
                acc += w
                if x < acc:
                    break
        if kind == "tool":
            return kind, dialogue_tool(r, self.words, self.pkgs)
        if kind == "json":
            return kind, dialogue_json(r, self.words, self.pkgs_full)
        if kind == "package":
            return kind, dialogue_package(r, self.pkgs_full)
        if kind == "command":
            return kind, dialogue_command(r, self.mans)
        return kind, dialogue_greet(r)

    def many(self, n, seed):
        r = random.Random(seed)
        out = []
        for _ in range(n):
            kind, (system, tools, turns) = self.one(r)
            out.append(render(system, tools, turns)[0])
        return out
