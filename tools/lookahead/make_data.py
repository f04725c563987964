#!/usr/bin/env python3
"""Makes LookaheadKV training data for the default model, on this machine, from fixed seeds.

Prompts (chat template, one user turn) come from two sources, both disjoint from the quality
suite that measures the result (core/eviction/eval/tasks.cc: word-list filler sentences, "magic
number" needles, variables X/Q/Z..., seeds 1..):
  text   a chunk of a text that ships with Debian or its Python (licences in
         /usr/share/common-licenses, package copyright files, Python standard-library sources)
         followed by a question about it (summaries, key terms, what the code does, ...);
  synth  a haystack of licence sentences with 1-4 planted records in templates the suite does not
         use ("the locker code of Alice is 4821", "set register B to 17, later add 5 to it", ...)
         and a question about one of them;
  people a text chunk as above with 1-3 planted facts answered by a name or a two-word phrase
         ("The reviewer of this section was Noor Quispe.", 'The code name of the release was
         "copper heron".'), names and texts other than the held-out families';
  roster a text chunk as above with 6-12 planted facts, each naming someone ("The auditor of the
         mirror was Tamsin Rahimi."), and a question about one of them.
Two more families are made only when asked for (--count-long, --count-turns; 0 by default): a
module trained with 48 of each kept no more held-out answers (docs/eviction_quality.md), so the
committed module's data holds neither.
  long   2-4 text chunks of different files joined (about 800-4,300 tokens, as long as the
         suite's longer prompts and beyond) with 1-8 such facts, names or phrases, set inside
         lines of the text rather than on lines of their own, and a question about one of them.
  turns  a conversation of two user turns: a chunk of prose (licences, copyright files) on one
         line with 2-6 such facts set inside it and a question about one, then, after the
         model's answer, a question about another; the target weighs the first answer and the
         second turn (question and answer) alike, since a session's future holds the turns
         after the first answer too.
The response is the model's own greedy answer (<= 256 tokens) from Glimpse's runtime
(`glimpse generate --json`, which matches transformers fp32 on this model), fed after the
assistant header. For each example the prompt's KV cache (fp16) and the training target (the
response rows' mean attention to each prompt key per layer and kv-head, normalised; see
lookahead_lib.py) are saved, so training never recomputes a prefill.

Output: DIR/examples/NNNN.pt and DIR/provenance.json (sources, files, seeds, command, versions).
Default DIR: ~/.cache/glimpse/lookahead-data/<model file stem>. Resumable: existing examples are
kept.

  $VENV/bin/python tools/lookahead/make_data.py [--count-text 48] [--count-synth 40] \
      [--count-people 48] [--count-roster 48] [--count-long 0] [--count-turns 0]
"""
import argparse
import glob
import json
import pathlib
import platform
import random
import shlex
import subprocess
import sys

import torch
from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import lookahead_lib as la  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
ASSISTANT_HEADER = 3  # "<|im_start|>assistant\n" at the end of the templated prompt
TEXT_QUESTIONS = [
    "Summarize the text above in three sentences.",
    "What is the main purpose of the text above?",
    "List three important terms used above and explain each briefly.",
    "Who or what is named in the text above, and in which role?",
    "What conditions or requirements does the text above state?",
    "Explain the text above to a new engineer in plain words.",
]
CODE_QUESTIONS = [
    "What does the code above do?",
    "Which functions are defined above, and what does each return?",
    "Describe one possible bug or edge case in the code above.",
]
NAMES = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas"]
THINGS = ["locker code", "badge number", "parcel id", "room number", "invoice number"]
REGISTERS = ["A", "B", "C", "D", "E", "F", "G", "H"]
# The "people" family: names, roles and phrases of its own (the quality suite's held-out families
# use other lists and other texts: WordNet glosses and fortunes).
GIVEN = ["Wanda", "Piotr", "Noor", "Emeric", "Sunniva", "Rafael", "Tamsin", "Gideon", "Ottilie",
         "Yusuf", "Marisol", "Anselm"]
FAMILY = ["Kowalczyk", "Achterberg", "Quispe", "Ferreira", "Nakamura", "Oyelaran", "Strand",
          "Vasquez", "Dunmore", "Ilves", "Rahimi", "Beaumont"]
ROLES = ["maintainer of the parser", "reviewer of this section", "release manager of version 3",
         "translator of the manual", "author of the test suite", "packager for the archive"]
LABELS = ["code name of the release", "name of the build server", "title of the design note",
          "motto of the project"]
ROSTER_HEADS = ["keeper", "auditor", "designer", "tester", "archivist", "courier"]
ROSTER_OBJECTS = ["of the parser", "of the manual", "of the build farm", "of the mirror",
                  "of the archive keys", "of the release notes"]
ADJ = ["copper", "distant", "gentle", "iron", "lucky", "wandering", "frosty", "golden"]
NOUN = ["heron", "anchor", "willow", "beacon", "falcon", "harvest", "canyon", "lighthouse"]


def text_sources() -> list:
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    files += sorted(glob.glob("/usr/share/doc/*/copyright"))[:200]
    files += sorted(glob.glob(f"/usr/lib/python3.{sys.version_info.minor}/*.py"))[:200]
    return [f for f in files if pathlib.Path(f).is_file()]


def text_prompt(rng: random.Random, files: list) -> tuple:
    while True:
        path = rng.choice(files)
        lines = pathlib.Path(path).read_text(errors="replace").splitlines()
        if len(lines) < 40:
            continue
        start = rng.randrange(0, max(1, len(lines) - 40))
        chunk, words = [], 0
        target = rng.randint(200, 420)  # words: ~300-650 tokens
        for line in lines[start:]:
            chunk.append(line)
            words += len(line.split())
            if words >= target:
                break
        if words < 150:
            continue
        questions = CODE_QUESTIONS if path.endswith(".py") else TEXT_QUESTIONS
        return "\n".join(chunk) + "\n\n" + rng.choice(questions), path


def licence_sentences(files: list) -> list:
    text = " ".join(pathlib.Path(f).read_text(errors="replace")
                    for f in files if "common-licenses" in f)
    return [s.strip() + "." for s in " ".join(text.split()).split(". ") if 6 <= len(s.split()) <= 40]


def synth_prompt(rng: random.Random, sentences: list) -> tuple:
    n = rng.randint(18, 40)
    hay = [rng.choice(sentences) for _ in range(n)]
    if rng.random() < 0.6:
        k = rng.randint(1, 4)
        people = rng.sample(NAMES, k)
        thing = rng.choice(THINGS)
        facts = [f"Note: the {thing} of {p} is {rng.randint(1000, 9999)}." for p in people]
        question = f"What is the {thing} of {rng.choice(people)}? Answer with the number."
    else:
        reg = rng.choice(REGISTERS)
        v, add = rng.randint(2, 60), rng.randint(2, 30)
        facts = [f"Set register {reg} to {v}.", f"Later, add {add} to register {reg}."]
        other = rng.choice([r for r in REGISTERS if r != reg])
        facts.insert(1, f"Set register {other} to {rng.randint(2, 60)}.")
        question = f"What is the final value of register {reg}? Answer with the number."
    slots = sorted(rng.sample(range(n + 1), len(facts)))
    for offset, (slot, fact) in enumerate(zip(slots, facts)):
        hay.insert(slot + offset, fact)
    return " ".join(hay) + "\n\n" + question, "synthetic"


def planted(rng: random.Random, text: str, facts: list) -> str:
    """`text` (a text_prompt) without its question, each fact on a line of its own at a random
    place."""
    lines = text.rsplit("\n\n", 1)[0].split("\n")
    for fact in facts:
        lines.insert(rng.randrange(len(lines) + 1), fact)
    return "\n".join(lines)


def people_prompt(rng: random.Random, files: list) -> tuple:
    """A chunk of a training text with 1-3 planted facts (who held a role, or what a label was
    called) and a question about one of them, answered by a name or a two-word phrase."""
    text, path = text_prompt(rng, files)
    if rng.random() < 0.6:
        roles = rng.sample(ROLES, rng.randint(1, 3))
        facts = [f"The {r} was {rng.choice(GIVEN)} {rng.choice(FAMILY)}." for r in roles]
        question = f"Who was the {rng.choice(roles)}? Answer with the full name."
    else:
        labels = rng.sample(LABELS, rng.randint(1, 2))
        facts = [f'The {lab} was "{rng.choice(ADJ)} {rng.choice(NOUN)}".' for lab in labels]
        question = f"What was the {rng.choice(labels)}? Answer with the phrase."
    return planted(rng, text, facts) + "\n\n" + question, path


def roster_prompt(rng: random.Random, files: list) -> tuple:
    """A text chunk as for "people" with 6-12 planted facts, each naming a different person, and a
    question about one: a text where many sentences name someone, so a name's first token alone
    does not tell which entries the answer needs."""
    text, path = text_prompt(rng, files)
    n = rng.randint(6, 12)
    roles = rng.sample([f"{head} {obj}" for head in ROSTER_HEADS for obj in ROSTER_OBJECTS], n)
    names = rng.sample([f"{g} {f}" for g in GIVEN for f in FAMILY], n)
    body = planted(rng, text, [f"The {role} was {name}." for role, name in zip(roles, names)])
    return body + f"\n\nWho was the {rng.choice(roles)}? Answer with the full name.", path


def inline(rng: random.Random, text: str, fact: str) -> str:
    """`text` with `fact` set into one of its lines, after a sentence's end where the line has
    one, else at the line's end."""
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    ends = [k + 1 for k in range(len(lines[i])) if lines[i].startswith(". ", k)]
    at = rng.choice(ends) if ends else len(lines[i])
    lines[i] = f"{lines[i][:at].rstrip()} {fact} {lines[i][at:].lstrip()}".strip()
    return "\n".join(lines)


def facts_and_questions(rng: random.Random, n: int) -> tuple:
    """n facts (who held a role, or what a label was called) and a question about each."""
    if rng.random() < 0.6:
        roles = rng.sample([f"{head} {obj}" for head in ROSTER_HEADS for obj in ROSTER_OBJECTS] +
                           ROLES, n)
        names = rng.sample([f"{g} {f}" for g in GIVEN for f in FAMILY], n)
        return ([f"The {role} was {name}." for role, name in zip(roles, names)],
                [f"Who was the {role}? Answer with the full name." for role in roles])
    labels = rng.sample(LABELS, min(n, len(LABELS)))
    return ([f'The {lab} was "{rng.choice(ADJ)} {rng.choice(NOUN)}".' for lab in labels],
            [f"What was the {lab}? Answer with the phrase." for lab in labels])


def long_prompt(rng: random.Random, files: list) -> tuple:
    """2-4 chunks of training texts joined, 1-8 facts (who held a role, what a label was called)
    set inside their lines, and a question about one: prompts as long as the suite's longer ones,
    whose facts read as part of the prose around them."""
    chunks = [text_prompt(rng, files) for _ in range(rng.randint(2, 4))]
    text = "\n\n".join(chunk.rsplit("\n\n", 1)[0] for chunk, _ in chunks)
    facts, questions = facts_and_questions(rng, rng.randint(1, 8))
    question = rng.choice(questions)
    for fact in facts:
        text = inline(rng, text, fact)
    return text + "\n\n" + question, ";".join(path for _, path in chunks)


def turns_prompt(rng: random.Random, files: list) -> tuple:
    """Two user turns: a chunk of prose on one line (a turn is a line of `glimpse generate
    --chat`'s input) with 2-6 facts set inside it and a question about one, then a question about
    another, which the first never asked for."""
    chunks = []
    # The count is drawn again before each chunk (one chunk a quarter of the time, else two),
    # kept so that --count-turns 48 draws the prompts of the module measured with them
    # (docs/eviction_quality.md; not the committed one, whose data holds no turns).
    while len(chunks) < rng.randint(1, 2):
        text, path = text_prompt(rng, files)
        if not path.endswith(".py"):
            chunks.append((" ".join(text.rsplit("\n\n", 1)[0].split()), path))
    text = " ".join(chunk for chunk, _ in chunks)
    facts, questions = facts_and_questions(rng, rng.randint(2, 6))
    for fact in facts:
        text = inline(rng, text, fact)
    first, second = rng.sample(range(len(facts)), 2)
    return ([text + " " + questions[first], questions[second]],
            ";".join(path for _, path in chunks))


def generate(glimpse: str, prompt: str) -> tuple:
    out = subprocess.run([glimpse, "generate", "--chat", "--prompt", prompt, "--max-tokens", "256",
                          "--json"], check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout.splitlines()[-1])
    ids = doc["prompt_tokens"]
    return ids[:-ASSISTANT_HEADER], ids[-ASSISTANT_HEADER:] + doc["tokens"]


def generate_turns(glimpse: str, turns: list) -> tuple:
    """Prompt ids of the first turn (without the assistant header), the response ids (the header,
    the first answer, then the second user turn as the chat template adds it and its answer), and
    the rows of each turn in the response."""
    out = subprocess.run([glimpse, "generate", "--chat", "--max-tokens", "256", "--json"],
                         input="\n".join(turns) + "\n", check=True, capture_output=True,
                         text=True)
    first, second = [json.loads(line) for line in out.stdout.splitlines()[-2:]]
    ids = first["prompt_tokens"]
    answer = ids[-ASSISTANT_HEADER:] + first["tokens"]
    later = second["prompt_tokens"] + second["tokens"]
    return ids[:-ASSISTANT_HEADER], answer + later, [len(answer), len(later)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache/glimpse/models/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--glimpse", default=str(REPO / "build/tools/cli/glimpse"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--count-text", type=int, default=48)
    ap.add_argument("--count-synth", type=int, default=40)
    ap.add_argument("--count-people", type=int, default=48)
    ap.add_argument("--count-roster", type=int, default=48)
    ap.add_argument("--count-long", type=int, default=0)
    ap.add_argument("--count-turns", type=int, default=0)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gguf = pathlib.Path(args.model)
    out = pathlib.Path(args.out or pathlib.Path.home() / ".cache/glimpse/lookahead-data" / gguf.stem)
    (out / "examples").mkdir(parents=True, exist_ok=True)
    files = text_sources()
    sentences = licence_sentences(files)
    rng = random.Random(args.seed)
    plan = [("text", i) for i in range(args.count_text)] + \
           [("synth", i) for i in range(args.count_synth)]
    rng.shuffle(plan)
    prompts = [text_prompt(rng, files) if kind == "text" else synth_prompt(rng, sentences)
               for kind, _ in plan]  # drawn up front: the set does not depend on resumption
    # Families added later are drawn from their own generator and appended, so the examples made
    # before them keep their indices and contents.
    later = [("people", people_prompt, args.count_people), ("roster", roster_prompt,
             args.count_roster), ("long", long_prompt, args.count_long),
             ("turns", turns_prompt, args.count_turns)]
    for offset, (kind, make, count) in enumerate(later, start=1):
        family_rng = random.Random(args.seed + offset)
        plan += [(kind, i) for i in range(count)]
        prompts += [make(family_rng, files) for _ in range(count)]
    model = la.load_model(gguf)
    records = []
    for i, ((kind, _), (prompt, source)) in enumerate(tqdm(list(zip(plan, prompts)),
                                                            desc="examples", unit="ex")):
        path = out / "examples" / f"{i:04d}.pt"
        records.append({"index": i, "kind": kind, "source": source})
        if path.exists():
            continue
        turns = None
        if isinstance(prompt, list):
            prompt_ids, response_ids, turns = generate_turns(args.glimpse, prompt)
        else:
            prompt_ids, response_ids = generate(args.glimpse, prompt)
        kv = la.prompt_cache(model, prompt_ids)
        target = la.response_targets(model, kv, response_ids, turns)
        torch.save({"prompt_ids": prompt_ids, "response_ids": response_ids, "turns": turns,
                    "kind": kind, "source": source, "target": target,
                    "kv": [(k.half(), v.half()) for k, v in kv]}, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)  # a run stopped mid-write leaves no example
        records[-1].update(prompt_tokens=len(prompt_ids), response_tokens=len(response_ids))
    provenance = {
        "generated_by": "tools/lookahead/make_data.py",
        "command": shlex.join(["python3", "tools/lookahead/make_data.py"] + sys.argv[1:]),
        "model": gguf.name, "seed": args.seed,
        "tool_versions": {"python": platform.python_version(), "torch": torch.__version__},
        "sources": "Debian /usr/share/common-licenses, /usr/share/doc/*/copyright, Python stdlib "
                   "sources; synthetic records over licence sentences; planted names and "
                   "phrases in those texts; rosters of planted names in them; if asked for, long "
                   "prompts of several chunks with names and phrases set inside their lines "
                   "and two-turn conversations about such facts in prose",
        "examples": records,
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(f"wrote {len(records)} examples to {out}")


if __name__ == "__main__":
    main()
