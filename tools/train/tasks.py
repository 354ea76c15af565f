"""Synthetic chat tasks with exact answers, shared by make_data.py (held-out text, tokenizer checks),
train.py (on-the-fly training samples as token ids) and eval_heldout.py (scoring).

A task sample is (prompt, answer), each a list of text *fragments*. Fragment boundaries are chosen
to be boundaries of the tokenizer's pre-tokenizer (Qwen2 regex: digits are single pre-tokens, a word
carries its leading space, punctuation runs swallow following newlines), so that the ids of a sample
are the concatenation of the ids of its fragments. make_data.py checks that claim against the real
tokenizer on many samples of every task; train.py then builds ids from a fragment table without
needing the tokenizers library on the GPU machine.

Chat format (the checkpoints' ChatML template with one user turn):
    <|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n{answer}<|im_end|>
"""
import random

USER_PREFIX = "<|im_start|>user\n"
ASSISTANT_PREFIX = "<|im_end|>\n<|im_start|>assistant\n"
END = "<|im_end|>"

# Training mix over tasks (relative weights). Addition gets the largest share: 3-digit addition must
# reach >= 90% exact match with these tiny models.
TRAIN_MIX = {
    "add": 0.34, "sub": 0.10, "sort": 0.08, "reverse_list": 0.07, "reverse_letters": 0.07,
    "count": 0.07, "copy": 0.06, "kv": 0.21,
}

# Held-out evaluation sets: name -> (generator, kwargs, number of samples). Different seed from
# training; train.py additionally rejects any training sample whose prompt is in the held-out set.
HELDOUT = {
    "add2": ("add", dict(digits=(2, 2)), 100),
    "add3": ("add", dict(digits=(3, 3)), 200),
    "add4": ("add", dict(digits=(4, 4)), 100),
    "sub3": ("sub", dict(digits=3), 100),
    "sort": ("sort", dict(), 100),
    "reverse_list": ("reverse_list", dict(), 100),
    "reverse_letters": ("reverse_letters", dict(), 100),
    "count": ("count", dict(), 100),
    "copy": ("copy", dict(), 100),
    "kv_short": ("kv", dict(pairs=(8, 16)), 100),
    "kv_long": ("kv", dict(pairs=(250, 330)), 30),      # ~2-3K tokens of context
    "kv_longer": ("kv", dict(pairs=(600, 700)), 10),    # ~5-6K tokens (optional split)
    # Needle retrieval (issue 21's long-context model): one to four needles in a haystack of
    # ~6.6 tokens a sentence; make_data.py prints the measured lengths.
    "needle_4k": ("needle", dict(sentences=(590, 590), needles=(1, 4)), 50),
    "needle_8k": ("needle", dict(sentences=(1210, 1210), needles=(1, 4)), 50),
    "needle_16k": ("needle", dict(sentences=(2450, 2450), needles=(1, 4)), 50),
}

# The haystack's sentences and the needles' (RULER's "special magic number" needles, method-specs
# §1 item 6): both "The <word> ... <value>." so that only the key phrase tells a needle apart.
HAYSTACK_VERBS = [" is", " was", " has", " likes", " needs", " finds", " sees", " keeps"]
NEEDLE_PHRASE = "The special magic number for"
NEEDLE_QUESTION = "What is the special magic number for"


def _digits(n, lead_space):
    s = str(n)
    return ([" "] if lead_space else []) + list(s)


def _word(w, lead_space):
    return [(" " + w) if lead_space else w]


def _rand_int_digits(rng, d):
    return rng.randint(0, 9) if d == 1 else rng.randint(10 ** (d - 1), 10 ** d - 1)


class TaskGen:
    """Draws task samples. `words`: list of lowercase words (keys, list items, letters to reverse)."""

    def __init__(self, words, seed):
        self.words = list(words)
        self.short_words = [w for w in self.words if 3 <= len(w) <= 7]
        self.rng = random.Random(seed)

    # Each generator returns (prompt_fragments, answer_fragments).
    def add(self, digits=None):
        r = self.rng
        if digits is None:
            u = r.random()
            if u < 0.40:
                digits = (3, 3)
            elif u < 0.55:
                digits = (2, 2)
            elif u < 0.70:
                digits = (4, 4)
            else:
                digits = (r.randint(1, 4), r.randint(1, 4))
        a, b = _rand_int_digits(r, digits[0]), _rand_int_digits(r, digits[1])
        return (["What is"] + _digits(a, True) + [" +"] + _digits(b, True) + ["?"], _digits(a + b, False))

    def sub(self, digits=None):
        r = self.rng
        d = digits or r.randint(1, 3)
        a = _rand_int_digits(r, d)
        b = r.randint(0, a)
        return (["What is"] + _digits(a, True) + [" -"] + _digits(b, True) + ["?"], _digits(a - b, False))

    def _num_list(self, xs, lead_space_first):
        out = []
        for i, x in enumerate(xs):
            if i:
                out.append(",")
            out += _digits(x, i > 0 or lead_space_first)
        return out

    def _word_list(self, ws, lead_space_first, sep=","):
        out = []
        for i, w in enumerate(ws):
            if i and sep:
                out.append(sep)
            out += _word(w, i > 0 or lead_space_first)
        return out

    def sort(self):
        r = self.rng
        xs = [r.randint(0, 99) for _ in range(r.randint(3, 7))]
        return (["Sort in ascending order:"] + self._num_list(xs, True), self._num_list(sorted(xs), False))

    def reverse_list(self):
        r = self.rng
        ws = r.sample(self.short_words, r.randint(3, 7))
        return (["Reverse the list:"] + self._word_list(ws, True), self._word_list(ws[::-1], False))

    def reverse_letters(self):
        r = self.rng
        w = r.choice(self.short_words)
        letters = list(w)
        return (["Reverse the letters:"] + self._word_list(letters, True, sep=None),
                self._word_list(letters[::-1], False, sep=None))

    def count(self):
        r = self.rng
        target = r.choice(self.short_words)
        others = r.sample(self.short_words, 4)
        others = [w for w in others if w != target][:3]
        n = r.randint(0, 5)
        length = r.randint(max(n, 4), 10)
        items = [target] * n + [r.choice(others) for _ in range(length - n)]
        r.shuffle(items)
        return (["Count the word"] + _word(target, True) + [" in:"] + self._word_list(items, True, sep=None),
                _digits(n, False))

    def copy(self):
        r = self.rng
        items = []
        for _ in range(r.randint(3, 10)):
            items.append(str(r.randint(0, 999)) if r.random() < 0.35 else r.choice(self.short_words))
        frags = []
        for it in items:
            frags += _digits(int(it), True) if it.isdigit() else _word(it, True)
        ans = []
        for i, it in enumerate(items):
            ans += _digits(int(it), i > 0) if it.isdigit() else _word(it, i > 0)
        return (["Repeat exactly:"] + frags, ans)

    def kv(self, pairs=None):
        r = self.rng
        n = r.randint(*pairs) if pairs else self.kv_pairs_default()
        keys = r.sample(self.words, n)
        vals = [r.randint(1000, 9999) for _ in keys]
        q = r.randrange(n)
        frags = ["Remember these records.\n"]
        for k, v in zip(keys, vals):
            frags += _word(k, False) + [":"] + _digits(v, True) + ["\n"]
        frags += ["What is the value of"] + _word(keys[q], True) + ["?"]
        return frags, _digits(vals[q], False)

    def needle(self, sentences=None, needles=None):
        """`needles` records "The special magic number for <key> is <5 digits>." at random depths
        among `sentences` haystack sentences "The <word> <verb> <word>."; the question asks for
        one key. Every sentence but the first starts with a space; the last one ends in ".\n"
        (punctuation swallows the newline in the pre-tokenizer, so it is one fragment)."""
        r = self.rng
        n_sent = r.randint(*sentences) if sentences else r.randint(5, 80)
        n_needles = r.randint(*needles) if needles else r.randint(1, 3)
        keys = r.sample(self.words, n_needles)
        vals = [r.randint(10000, 99999) for _ in keys]
        slots = sorted(r.sample(range(n_sent + n_needles), n_needles))
        body, k = [], 0
        for i in range(n_sent + n_needles):
            lead = " " if i else ""
            if k < n_needles and slots[k] == i:
                body.append([lead + NEEDLE_PHRASE] + _word(keys[k], True) + [" is"] + _digits(vals[k], True))
                k += 1
            else:
                a, b = r.choice(self.short_words), r.choice(self.short_words)
                body.append([lead + "The"] + _word(a, True) + [r.choice(HAYSTACK_VERBS)] + _word(b, True))
        frags = ["Find the special magic numbers in the text.\n"]
        for i, sentence in enumerate(body):
            frags += sentence + ([".\n"] if i == len(body) - 1 else ["."])
        q = r.randrange(n_needles)
        frags += [NEEDLE_QUESTION] + _word(keys[q], True) + ["?"]
        return frags, _digits(vals[q], False)

    def kv_pairs_default(self):
        # Short contexts most of the time; train.py asks for long ones explicitly in long batches.
        return self.rng.randint(2, 40)

    def sample(self, name, **kw):
        return getattr(self, name)(**kw)

    def sample_mix(self, mix=TRAIN_MIX):
        names = list(mix)
        name = self.rng.choices(names, weights=[mix[n] for n in names])[0]
        return name, self.sample(name)


def sample_text(prompt_frags, answer_frags=None):
    """The full chat text of a sample (answer None: the generation prompt only)."""
    text = USER_PREFIX + "".join(prompt_frags) + ASSISTANT_PREFIX
    if answer_frags is not None:
        text += "".join(answer_frags) + END
    return text


def normalize_answer(s):
    return " ".join(s.strip().split())
