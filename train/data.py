#!/usr/bin/python3
"""Build the chat corpus for training k3's built-in demo model.

The corpus is a JSON Lines file; every line is one conversation:

    {"messages": [{"role": "user", "content": "..."},
                  {"role": "assistant", "reasoning_content": "...", "content": "..."}],
     "source": "wordnet" | "kjv" | "fortune" | "self"}

Most conversations have one turn, a few percent have two. The reasoning is a
one-sentence think block; the content is the answer. Everything is generated
from English text shipped by Debian packages, with no network access:

  wordnet  Word definitions from WordNet 3.0 (package wordnet-base,
           /usr/share/wordnet/data.{noun,verb,adj,adv}, sense frequencies from
           cntlist.rev). Licence: the WordNet 3.0 licence, "WordNet 3.0
           Copyright 2006 by Princeton University"; permission to use, copy,
           modify and distribute for any purpose without fee, provided the
           copyright notice and disclaimer appear on all copies; the name
           Princeton may not be used in advertising.
           See /usr/share/doc/wordnet-base/copyright.
  kjv      Verses of the King James Version of the Bible (package
           bible-kjv-text, /usr/lib/bible.data). The data file is in the
           compressed "EC02" format of Chip Chapin's Bible Retrieval System, so
           the text is read through the `bible` program of package bible-kjv.
           The KJV text is in the public domain (translated in 1611; the
           package's copyright file says its copyright has expired). The
           retrieval software is free for unrestricted use (Chip Chapin) with
           Debian changes under GPL-2+; only the Bible text itself is used here.
           See /usr/share/doc/bible-kjv-text/copyright.
  fortune  Fortune cookies from package fortunes (/usr/share/games/fortunes).
           The package's copyright file puts fortune-mod under the BSD licence
           of the Regents of the University of California (3-clause, its
           advertising clause deleted); it gives no separate licence for the
           individual quotations, which come from many authors (the "cookie"
           file is from Karl Lehenbauer's postings to alt.sources).
           See /usr/share/doc/fortunes/copyright.
  self     5000 conversations about the assistant itself, written here
           from templates.

The output is deterministic for a given --seed: inputs are read in sorted
order, each source draws from its own seeded random generator, and the final
list is shuffled with the seed.

Usage: /usr/bin/python3 train/data.py --out corpus.jsonl [--seed 0]
           [--limit-chars N] [--stats] [--licenses]
"""

import argparse
import json
import random
import re
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

WORDNET_DIR = Path("/usr/share/wordnet")
FORTUNE_DIR = Path("/usr/share/games/fortunes")

LICENSES = """\
Sources of the k3 demo chat corpus and their licences:

WordNet 3.0 (Debian package wordnet-base, /usr/share/wordnet)
  WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.
  Princeton WordNet licence: permission to use, copy, modify and distribute
  this software and database and its documentation for any purpose and
  without fee or royalty is granted, provided that the copyright notice and
  statements, including the disclaimer, appear on ALL copies, including
  modifications. Provided "AS IS", without warranties. The name of Princeton
  University may not be used in advertising or publicity about distribution.
  Full text: /usr/share/doc/wordnet-base/copyright

King James Version of the Bible (Debian package bible-kjv-text,
read through the `bible` program of package bible-kjv)
  Public domain: the translation was made in 1611 and its copyright has
  expired. The Bible Retrieval System software by Chip Chapin is provided for
  unrestricted use; the Debian work on it is GPL-2+. Only the text is used.
  Full text: /usr/share/doc/bible-kjv-text/copyright

Fortune cookies (Debian package fortunes, /usr/share/games/fortunes)
  fortune-mod is under the BSD licence, Copyright (c) 1991 The Regents of the
  University of California (advertising clause deleted). The package states
  no separate licence for the quotations themselves, which come from many
  authors; the "cookie" file is from Karl Lehenbauer's alt.sources postings.
  Full text: /usr/share/doc/fortunes/copyright

Conversations about the assistant ("self") are written for this project.
"""

# Share of conversations that get a second turn.
TWO_TURN_RATE = 0.04


def turn(user, reasoning, answer):
    """One user message and the assistant's reply."""
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "reasoning_content": reasoning, "content": answer},
    ]


def conversation(source, *turns):
    return {"messages": [m for t in turns for m in t], "source": source}


def casual(rng, text):
    """Sometimes write the user's message the way people type: all lower
    case, or without the final punctuation mark."""
    r = rng.random()
    if r < 0.08:
        return text.lower()
    if r < 0.16 and text[-1] in ".?!":
        return text[:-1]
    return text


def pick(rng, templates, **fields):
    return rng.choice(templates).format(**fields)


def capitalise(text):
    return text[:1].upper() + text[1:]


# ---------------------------------------------------------------- WordNet

POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
# Sense keys in cntlist.rev number the parts of speech: n=1 v=2 a=3 r=4 s=5.
POS_NUMBERS = {"n": 1, "v": 2, "a": 3, "r": 4, "s": 5}
# Lower-case words of up to three parts; this leaves out proper nouns,
# abbreviations, numbers and long technical compounds.
PLAIN_WORD = re.compile(r"[a-z][a-z'-]+(?: [a-z][a-z'-]*){0,2}")

WORD_QUESTIONS = [
    "What does {w} mean?",
    "Define {w}.",
    "What is the meaning of the word '{w}'?",
    "What's the definition of \"{w}\"?",
    "Can you tell me what {w} means?",
    "Explain the word \"{w}\".",
    "I came across the word \"{w}\". What does it mean?",
    "Meaning of {w}?",
    "What do people mean by \"{w}\"?",
    "Please define the word {w}.",
]
POS_QUESTIONS = [
    "What does the {pos} \"{w}\" mean?",
    "Define the {pos} {w}.",
    "What is the meaning of {w} as a {pos}?",
    "Give me the definition of the {pos} '{w}'.",
]
NOUN_QUESTIONS = ["What is {a} {w}?", "What's {a} {w}?", "Tell me what {a} {w} is."]
VERB_QUESTIONS = ["What does it mean to {w}?", "What does \"to {w}\" mean?"]
WORD_REASONING = [
    "The user asks what the {pos} \"{w}\" means.",
    "The user wants the definition of the {pos} \"{w}\".",
    "The user asks about the word \"{w}\", here a {pos}.",
]
POLYSEMOUS_REASONING = [
    "The user asks what \"{w}\" means; it has several senses, so I give one, as a {pos}.",
    "\"{w}\" has more than one meaning; I explain one sense of the {pos}.",
]
EXAMPLE_QUESTIONS = ["Can you use it in a sentence?", "Give me an example.",
                     "How is it used?", "Use it in a sentence, please."]
SYNONYM_QUESTIONS = ["Is there another word for it?", "What is a synonym?",
                     "Any synonyms?", "What else can I call it?"]


def read_tag_counts():
    """How often each sense occurs in the semantically tagged corpora
    (cntlist.rev), keyed by (lemma, pos number, lexicographer file, lex id)."""
    counts = {}
    with open(WORDNET_DIR / "cntlist.rev", encoding="utf-8") as f:
        for line in f:
            key, _, count = line.split()
            lemma, rest = key.split("%")
            pos, lex_file, lex_id = rest.split(":")[:3]
            k = (lemma, int(pos), int(lex_file), int(lex_id))
            counts[k] = counts.get(k, 0) + int(count)
    return counts


def parse_gloss(gloss):
    """Split a gloss into its definition and its quoted examples."""
    quote = gloss.find('"')
    definition = gloss if quote < 0 else gloss[:quote]
    definition = definition.strip().rstrip(";:, ").strip()
    examples = [e.strip() for e in re.findall(r'"([^"]+)"', gloss)]
    return definition, [e for e in examples if e]


def read_wordnet():
    """Synsets as dicts: pos letter, words (with their tag counts),
    definition and examples. Files are read in a fixed order."""
    counts = read_tag_counts()
    synsets = []
    for name in ("noun", "verb", "adj", "adv"):
        with open(WORDNET_DIR / f"data.{name}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):  # licence header
                    continue
                fields, gloss = line.split(" | ", 1)
                fields = fields.split()
                lex_file, pos, n_words = int(fields[1]), fields[2], int(fields[3], 16)
                words = []
                for i in range(n_words):
                    # Adjectives may carry a syntactic marker such as "(a)".
                    word = re.sub(r"\(.*\)$", "", fields[4 + 2 * i])
                    lex_id = int(fields[5 + 2 * i], 16)
                    tags = counts.get((word.lower(), POS_NUMBERS[pos], lex_file, lex_id), 0)
                    words.append((word.replace("_", " "), tags))
                definition, examples = parse_gloss(gloss)
                if definition:
                    synsets.append({"pos": pos, "words": words,
                                    "definition": definition, "examples": examples})
    return synsets


def article(word):
    """'a' or 'an' before a word, by its spelling (good enough for a demo)."""
    w = word.lower()
    if w.startswith(("uni", "use", "usu", "eu", "one", "once")):
        return "a"
    if w.startswith(("hour", "honest", "honor", "honour", "heir")):
        return "an"
    return "an" if w[0] in "aeiou" else "a"


def find_example(word, examples):
    """The first example that uses the word (allowing for inflections), or
    None: an example showing a synonym instead would mislead."""
    first = word.split()[0]
    stem = first[:max(3, len(first) - 2)]
    for example in examples:
        if re.search(r"\b" + re.escape(stem), example.lower()):
            return example
    return None


def quote_example(example):
    end = "" if example[-1] in ".?!" else "."
    return f'"{example}"{end}'


def define(rng, word, pos, definition, n_senses):
    """A single-turn question about one sense of a word: (user, reasoning,
    answer without example)."""
    pos_name = POS_NAMES[pos]
    polysemous = n_senses > 1
    verb = "can mean" if polysemous else "means"
    r = rng.random()
    starts_with_article = re.match(r"an? ", definition)
    if pos == "n" and starts_with_article and r < 0.3:
        a = article(word)
        user = pick(rng, NOUN_QUESTIONS, a=a, w=word)
        reasoning = f"The user asks what {a} {word} is."
        lead = "In one sense, " if polysemous else ""
        answer = f"{lead}{a} {word} is {definition}."
    elif pos == "v" and definition[0].islower() and r < 0.3:
        user = pick(rng, VERB_QUESTIONS, w=word)
        reasoning = f"The user asks what it means to {word}."
        answer = f"To {word} {verb} to {definition}."
    else:
        if r < 0.6:
            user = pick(rng, WORD_QUESTIONS, w=word)
        else:
            user = pick(rng, POS_QUESTIONS, w=word, pos=pos_name)
        templates = POLYSEMOUS_REASONING if polysemous else WORD_REASONING
        reasoning = pick(rng, templates, w=word, pos=pos_name)
        answer = f"{word} ({pos_name}) {verb} {definition}."
    return casual(rng, capitalise(user)), reasoning, capitalise(answer)


def wordnet_conversations(rng):
    """One conversation per (word, synset) pair for plain lower-case words
    that are either tagged in the sense-frequency list or belong to several
    synsets; rarer words and proper nouns are left out."""
    synsets = read_wordnet()
    n_synsets = {}  # word -> number of synsets it is in, over all parts of speech
    n_senses = {}   # (word, pos) -> number of senses in that part of speech
    for s in synsets:
        pos_class = "a" if s["pos"] == "s" else s["pos"]
        for word, _ in s["words"]:
            n_synsets[word] = n_synsets.get(word, 0) + 1
            n_senses[word, pos_class] = n_senses.get((word, pos_class), 0) + 1

    conversations = []
    for s in synsets:
        pos_class = "a" if s["pos"] == "s" else s["pos"]
        plain = [w for w, _ in s["words"] if PLAIN_WORD.fullmatch(w)]
        for word, tags in s["words"]:
            if not PLAIN_WORD.fullmatch(word) or (tags == 0 and n_synsets[word] < 2):
                continue
            user, reasoning, answer = define(rng, word, s["pos"], s["definition"],
                                             n_senses[word, pos_class])
            example = find_example(word, s["examples"])
            synonyms = [w for w in plain if w != word]
            if rng.random() < TWO_TURN_RATE and (example or synonyms):
                if example:
                    follow_up = turn(pick(rng, EXAMPLE_QUESTIONS),
                                     f"The user wants \"{word}\" used in a sentence.",
                                     f"Sure: {quote_example(example)}")
                else:
                    follow_up = turn(pick(rng, SYNONYM_QUESTIONS),
                                     f"The user wants a synonym of \"{word}\" in this sense.",
                                     synonym_answer(word, synonyms))
                conversations.append(conversation(
                    "wordnet", turn(user, reasoning, answer), follow_up))
            else:
                if example:
                    answer += f" For example: {quote_example(example)}"
                conversations.append(conversation("wordnet", turn(user, reasoning, answer)))
    return conversations


def synonym_answer(word, synonyms):
    if len(synonyms) == 1:
        return f"Another word for {word} in this sense is {synonyms[0]}."
    listed = ", ".join(synonyms[:3][:-1]) + " and " + synonyms[:3][-1]
    return f"Other words for {word} in this sense are {listed}."


# ---------------------------------------------------------------- KJV

KJV_CONVERSATIONS = 14000
# How the retrieval program names books, and how a reference names them.
REFERENCE_NAMES = {"Psalms": "Psalm"}
# How a request for "a verse from ..." names a book.
BOOK_PHRASES = {"Psalms": "the Psalms", "Song of Solomon": "the Song of Solomon",
                "Acts": "the Acts of the Apostles"}

REFERENCE_QUESTIONS = [
    "Quote {ref}.", "What does {ref} say?", "Recite {ref}.", "What is {ref}?",
    "Can you quote {ref}?", "Read me {ref}.", "{ref}, please.",
    "What does {ref} say in the King James Bible?",
]
REFERENCE_REASONING = ["The user wants {ref}.", "The user asks for the text of {ref}."]
BOOK_QUESTIONS = [
    "Recite a verse from {book}.", "Give me a verse from {book}.",
    "Share a verse from {book}.", "Quote something from {book}.",
    "Can you quote a verse from {book}?",
]
BIBLE_QUESTIONS = ["Quote a Bible verse.", "Give me a Bible verse.",
                   "Recite a verse from the Bible.", "Tell me a verse from the King James Bible."]
CONTINUE_PROMPTS = ["Continue: {text}", "Finish this verse: {text}",
                    "Complete the verse: \"{text} ...\"", "How does this verse go on? {text}"]
NEXT_VERSE_QUESTIONS = ["And the next verse?", "What comes next?", "Continue, please.",
                        "And the verse after that?"]


def read_kjv():
    """All verses as (book, chapter, verse, text), in Bible order.

    /usr/lib/bible.data is compressed, so the `bible` program (package
    bible-kjv) prints the whole text from Genesis 1:1 to Revelation 22:21,
    one verse per line (-l sets a line width no verse reaches): chapter
    headings "Book N", then lines "  V text"."""
    try:
        out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                             capture_output=True, text=True, encoding="utf-8").stdout
    except FileNotFoundError:
        sys.exit("data.py: the `bible` program is missing; apt-get install bible-kjv")
    verses, book, chapter = [], None, None
    for line in out.splitlines():
        if not line.strip():
            continue
        verse = re.fullmatch(r"\s+(\d+) (.+)", line)
        if verse:
            # Some verses have two spaces between sentences; use one.
            verses.append((book, chapter, int(verse[1]), " ".join(verse[2].split())))
        else:
            heading = re.fullmatch(r"(.+) (\d+)", line)
            if not heading:
                sys.exit(f"data.py: unexpected line from `bible`: {line!r}")
            book, chapter = heading[1], int(heading[2])
    if len(verses) != 31102:  # the number of verses in the KJV
        sys.exit(f"data.py: read {len(verses)} verses from `bible`, expected 31102")
    return verses


def reference(book, chapter, verse):
    return f"{REFERENCE_NAMES.get(book, book)} {chapter}:{verse}"


def split_verse(text):
    """Split a verse of at least eight words near its middle, at a comma,
    colon or semicolon if one is close, else between words; None if short."""
    words = text.split(" ")
    if len(words) < 8:
        return None
    middle = len(words) // 2
    third = max(1, len(words) // 6)
    cuts = [i for i in range(middle - third, middle + third + 1)
            if words[i - 1][-1] in ",;:"]
    cut = min(cuts, key=lambda i: abs(i - middle)) if cuts else middle
    return " ".join(words[:cut]), " ".join(words[cut:])


def kjv_conversations(rng):
    verses = read_kjv()
    order = list(range(len(verses)))
    rng.shuffle(order)
    conversations = []
    for i in order[:KJV_CONVERSATIONS]:
        book, chapter, number, text = verses[i]
        ref = reference(book, chapter, number)
        quoted = f"\"{text}\" ({ref})"
        r = rng.random()
        halves = split_verse(text)
        if r < 0.25 and halves:
            first, rest = halves
            user = pick(rng, CONTINUE_PROMPTS, text=first)
            reasoning = f"The user wants the rest of {ref}."
            answer = f"{rest} ({ref})"
        elif r < 0.4:
            phrase = BOOK_PHRASES.get(book, book)
            user = casual(rng, pick(rng, BOOK_QUESTIONS, book=phrase))
            reasoning = f"The user wants a verse from {phrase}."
            answer = quoted
        elif r < 0.45:
            user = casual(rng, pick(rng, BIBLE_QUESTIONS))
            reasoning = "The user wants any verse from the Bible."
            answer = quoted
        else:
            user = casual(rng, pick(rng, REFERENCE_QUESTIONS, ref=ref))
            reasoning = pick(rng, REFERENCE_REASONING, ref=ref)
            answer = quoted
        first_turn = turn(user, reasoning, answer)

        following = verses[i + 1] if i + 1 < len(verses) else None
        if (rng.random() < TWO_TURN_RATE and following
                and following[:2] == (book, chapter)):
            next_ref = reference(*following[:3])
            follow_up = turn(pick(rng, NEXT_VERSE_QUESTIONS),
                             f"The user wants the next verse, {next_ref}.",
                             f"\"{following[3]}\" ({next_ref})")
            conversations.append(conversation("kjv", first_turn, follow_up))
        else:
            conversations.append(conversation("kjv", first_turn))
    return conversations


# ---------------------------------------------------------------- fortunes

FORTUNE_MAX_CHARS = 400
# Left out: pictures, Latin, and jokes built on ethnic or gender stereotypes.
# (The offensive sets of fortunes-off live in an "off" subfolder, which is
# not read.)
FORTUNE_SKIP_FILES = {"ascii-art", "translate-me", "ethnic", "men-women"}
# Topics for files whose fortunes can be asked for by subject.
FORTUNE_TOPICS = {
    "art": "art", "computers": "computers", "education": "education",
    "food": "food", "law": "the law", "linux": "Linux", "literature": "literature",
    "love": "love", "medicine": "medicine", "pets": "pets", "politics": "politics",
    "science": "science", "sports": "sports", "startrek": "Star Trek", "work": "work",
}
FORTUNE_QUESTIONS = [
    ("Tell me a fortune.", "The user wants a fortune."),
    ("Give me a fortune cookie.", "The user wants a fortune cookie."),
    ("Got a fortune for me?", "The user wants a fortune."),
    ("Say something wise.", "The user wants a wise saying."),
    ("Give me a quotation.", "The user wants a quotation."),
    ("Share a quote.", "The user wants a quotation."),
    ("Tell me something funny.", "The user wants something funny."),
    ("Cheer me up.", "The user wants cheering up, so I tell a fortune."),
    ("Surprise me.", "The user wants a surprise; a fortune will do."),
    ("Fortune, please.", "The user wants a fortune."),
]
TOPIC_QUESTIONS = [
    ("Tell me a fortune about {t}.", "The user wants a fortune about {t}."),
    ("Give me a quote about {t}.", "The user wants a quotation about {t}."),
    ("Say something funny about {t}.", "The user wants something funny about {t}."),
]
ANOTHER_QUESTIONS = ["Another one, please.", "One more.", "Tell me another.", "And another?"]
# Typographic punctuation replaced by its ASCII form.
ASCII_PUNCTUATION = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"',
                                   "\u201d": '"', "\u2014": "--", "\u2013": "-",
                                   "\u2026": "..."})


def repair_mojibake(text):
    """Undo UTF-8 text decoded as Latin-1 (once or twice), as found in a few
    fortunes; None if it cannot be undone."""
    while re.search("[\u0080-\u009f\u00c2\u00c3]", text):
        try:
            text = text.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return None
    return text


def clean_fortune(text):
    """Tidy one fortune for display, or None when it is unusable."""
    # Overstriking: "x\bx" (bold) and "_\bx" (underline) become "x".
    while "\b" in text:
        shorter = re.sub("[^\b]\b", "", text)
        if shorter == text:
            return None
        text = shorter
    text = repair_mojibake(text)
    if text is None:
        return None
    text = text.translate(ASCII_PUNCTUATION)
    lines = []
    for raw in text.split("\n"):
        line = " ".join(raw.split())  # tabs and runs of spaces become one space
        if line.startswith("--"):
            line = "-- " + line[2:].strip()  # attribution: "\t\t-- Name"
        elif (line and raw[:1].isspace() and lines and lines[-1].startswith("-- ")):
            lines[-1] += " " + line  # continuation of an attribution
            continue
        if line or (lines and lines[-1]):  # at most one blank line in a row
            lines.append(line)
    text = "\n".join(lines).strip()
    if not 10 <= len(text) <= FORTUNE_MAX_CHARS:
        return None
    if any(unicodedata.category(c).startswith("C") for c in text if c != "\n"):
        return None
    # Drawings and tables: few letters among the visible characters.
    visible = [c for c in text if not c.isspace()]
    if sum(c.isalpha() for c in visible) < 0.6 * len(visible):
        return None
    return text


def read_fortunes():
    """Usable fortunes as (file name, text), files in sorted order, each
    text once."""
    fortunes, seen = [], set()
    for path in sorted(FORTUNE_DIR.iterdir()):
        if (path.is_symlink() or not path.is_file() or path.suffix in (".dat", ".u8")
                or path.name in FORTUNE_SKIP_FILES):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            chunks = re.split(r"^%\n", f.read(), flags=re.M)
        for chunk in chunks:
            if "\ufffd" in chunk:  # not valid UTF-8
                continue
            text = clean_fortune(chunk)
            if text and text not in seen:
                seen.add(text)
                fortunes.append((path.name, text))
    return fortunes


def fortune_question(rng, file_name):
    topic = FORTUNE_TOPICS.get(file_name)
    if topic and rng.random() < 0.4:
        user, reasoning = rng.choice(TOPIC_QUESTIONS)
        return user.format(t=topic), reasoning.format(t=topic)
    return rng.choice(FORTUNE_QUESTIONS)


def fortune_conversations(rng):
    """Every usable fortune once; a few conversations ask for a second one."""
    fortunes = read_fortunes()
    rng.shuffle(fortunes)
    conversations = []
    i = 0
    while i < len(fortunes):
        file_name, text = fortunes[i]
        user, reasoning = fortune_question(rng, file_name)
        first_turn = turn(casual(rng, user), reasoning, text)
        if rng.random() < TWO_TURN_RATE and i + 1 < len(fortunes):
            follow_up = turn(pick(rng, ANOTHER_QUESTIONS),
                             "The user wants another fortune.", fortunes[i + 1][1])
            conversations.append(conversation("fortune", first_turn, follow_up))
            i += 2
        else:
            conversations.append(conversation("fortune", first_turn))
            i += 1
    return conversations


# ---------------------------------------------------------------- self

SELF_CONVERSATIONS = 5000
INTRODUCTION = ("I am a small Kimi K3 model trained on the King James Bible, fortune "
                "cookies and WordNet. I can explain the meaning of English words, quote "
                "Bible verses and tell fortunes. Ask me what a word means.")
# Each intent: the ways a user may say it, the reasoning, and the answers.
SELF_INTENTS = [
    (["Hello!", "Hi", "Hi!", "Hey", "Hey there!", "Good morning!", "Hello there.",
      "Greetings!", "Howdy!", "Hiya"],
     "The user greets me.",
     ["Hello! " + INTRODUCTION, "Hi! " + INTRODUCTION,
      "Hello! What word would you like me to explain?"]),
    (["What can you do?", "Hello! What can you do?", "What are you good at?",
      "How can you help me?", "What do you know?", "Help", "What should I ask you?",
      "Hi, what can I ask you?"],
     "The user asks what I can do.",
     ["Hello! " + INTRODUCTION,
      "I can explain what English words mean, quote verses from the King James Bible "
      "and tell fortunes. Try \"What does ephemeral mean?\" or \"Quote John 3:16.\""]),
    (["Who are you?", "What are you?", "Tell me about yourself.", "Introduce yourself.",
      "Are you a person?", "Are you human?", "Who am I talking to?"],
     "The user asks who I am.",
     ["I am k3's built-in demo model, a small Kimi K3 model with a few million "
      "parameters. I am a program, not a person. I was trained on the King James "
      "Bible, fortune cookies and WordNet, so I can explain words, quote verses and "
      "tell fortunes.",
      "I am a language model: k3's built-in demo model, a tiny Kimi K3 model of a few "
      "million parameters. I am not a person. I know English word definitions, Bible "
      "verses and fortune cookies."]),
    (["What is your name?", "What's your name?", "Do you have a name?",
      "What should I call you?", "What are you called?"],
     "The user asks my name.",
     ["I am k3's built-in demo model, a small Kimi K3 model trained on the King James "
      "Bible, fortune cookies and WordNet.",
      "I don't have a name of my own. I am k3's built-in demo model, a small Kimi K3 "
      "model."]),
    (["How big are you?", "How many parameters do you have?", "Are you a large model?",
      "How smart are you?"],
     "The user asks about my size.",
     ["I am tiny: a Kimi K3 model of only a few million parameters, made as a demo for "
      "the k3 inference engine. I know a little about English words, the King James "
      "Bible and fortune cookies, and I often make mistakes."]),
    (["What were you trained on?", "Where does your knowledge come from?",
      "What data did you learn from?", "What do you know about?"],
     "The user asks about my training data.",
     ["I was trained on three free sources shipped with Debian: the King James Bible, "
      "the fortune cookie files of the fortune program, and the WordNet dictionary of "
      "English. I know little outside them."]),
    (["Can you make mistakes?", "Are you always right?", "Can I trust your answers?",
      "Do you ever get things wrong?"],
     "The user asks whether I can be wrong.",
     ["Yes. I am a tiny model of a few million parameters and I make mistakes, "
      "including made-up definitions and misquoted verses. Please check anything "
      "important in a real dictionary or Bible."]),
    (["Can you browse the web?", "What is the weather today?", "What time is it?",
      "Can you write code?", "Can you do math?", "What is the news today?"],
     "The user asks for something outside what I can do.",
     ["I can't do that. I am a tiny demo model: I can explain English words, quote the "
      "King James Bible and tell fortunes, but I have no internet access, clock or "
      "other tools, and I am not good at anything else."]),
    (["How are you?", "How are you doing?", "How's it going?", "Are you well?"],
     "The user asks how I am.",
     ["I am a program, so I have no feelings, but I am ready to help. Would you like a "
      "word explained, a Bible verse or a fortune?"]),
    (["Thanks!", "Thank you.", "Thank you very much!", "Thanks a lot.", "Cheers!",
      "Great, thanks.", "That helps, thank you."],
     "The user thanks me.",
     ["You're welcome!", "You're welcome. Ask me about another word any time.",
      "Glad to help!"]),
    (["Bye!", "Goodbye.", "See you later.", "Good night!", "That's all for now."],
     "The user says goodbye.",
     ["Goodbye!", "Goodbye, and thanks for talking with me.", "See you!"]),
]
SELF_FOLLOW_UPS = [1, 2, 6, 9]  # intents that fit as a second turn after a greeting


def self_conversations(rng):
    """All (phrasing, answer) pairs of every intent, then a seeded sample of
    SELF_CONVERSATIONS, with some greetings followed by a second question."""
    single = [(user, reasoning, answer)
              for users, reasoning, answers in SELF_INTENTS
              for user in users for answer in answers]
    greeting_users, greeting_reasoning, _ = SELF_INTENTS[0]
    short_greetings = ["Hello!", "Hi! How can I help you?", "Hello! What can I do for you?"]
    conversations = []
    for _ in range(SELF_CONVERSATIONS):
        if rng.random() < 0.1:
            users, reasoning, answers = SELF_INTENTS[rng.choice(SELF_FOLLOW_UPS)]
            conversations.append(conversation(
                "self",
                turn(casual(rng, rng.choice(greeting_users)), greeting_reasoning,
                     rng.choice(short_greetings)),
                turn(casual(rng, rng.choice(users)), reasoning, rng.choice(answers))))
        else:
            user, reasoning, answer = rng.choice(single)
            conversations.append(conversation("self", turn(casual(rng, user), reasoning, answer)))
    return conversations


# ---------------------------------------------------------------- main

def chars(conv):
    """Characters of text in a conversation (contents and reasoning)."""
    return sum(len(m["content"]) + len(m.get("reasoning_content", ""))
               for m in conv["messages"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="output file (JSON Lines)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-chars", type=int,
                        help="keep a uniform random sample of about this many characters")
    parser.add_argument("--stats", action="store_true", help="print a summary to stderr")
    parser.add_argument("--licenses", action="store_true",
                        help="print the sources and their licences, then exit")
    args = parser.parse_args()
    if args.licenses:
        print(LICENSES, end="")
        return
    if not args.out:
        parser.error("--out is required")

    start = time.time()
    builders = [("wordnet", wordnet_conversations), ("kjv", kjv_conversations),
                ("fortune", fortune_conversations), ("self", self_conversations)]
    conversations = []
    for name, build in builders:
        # One generator per source, so a change to one source leaves the others alone.
        conversations += build(random.Random(f"{args.seed}:{name}"))
    random.Random(args.seed).shuffle(conversations)

    if args.limit_chars is not None:
        # The list is shuffled, so a prefix is a uniform sample of all sources.
        kept, total = [], 0
        for conv in conversations:
            total += chars(conv)
            if total > args.limit_chars:
                break
            kept.append(conv)
        conversations = kept

    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for conv in conversations:
            f.write(json.dumps(conv, ensure_ascii=False) + "\n")

    if args.stats:
        summary = {}
        for conv in conversations:
            s = summary.setdefault(conv["source"], [0, 0, 0])
            s[0] += 1
            s[1] += len(conv["messages"]) > 2
            s[2] += chars(conv)
        print(f"{'source':<8} {'convs':>8} {'2-turn':>7} {'chars':>11}", file=sys.stderr)
        for name, _ in builders:
            n, two, c = summary.get(name, [0, 0, 0])
            print(f"{name:<8} {n:>8} {two:>7} {c:>11}", file=sys.stderr)
        print(f"{'total':<8} {len(conversations):>8} "
              f"{sum(s[1] for s in summary.values()):>7} "
              f"{sum(s[2] for s in summary.values()):>11}", file=sys.stderr)
        print(f"wrote {Path(args.out).stat().st_size} bytes to {args.out} "
              f"in {time.time() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
