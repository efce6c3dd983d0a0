"""Real sentences in 11 languages (incl. 2,000-character inputs): exact sentence splits, no false cuts,
limits and losslessness for the stream buffer (fed like LLM tokens) and the whole-text chunker."""

from __future__ import annotations

import random

import pytest
from text_samples import SAMPLES, long_text

from realtime_tts.text import SentenceBuffer, Unit, budget_length, normalize_space, split_text

# Every sentence its own unit: target at the minimum, and no early clause cut for the first unit.
SENTENCE_MODE = {"min_chars": 4, "first_segment_min_chars": 320, "target_chars": 4, "max_chars": 320}

EXPECTED_SENTENCES = {
    "en": [
        "Sure!",
        "Dr. Smith arrived at 9:30 a.m. on Monday.",
        "She said the results were good, e.g. a 3.5% improvement over version 2.1.4!",
        "Did you read the report at https://example.com/report.v2.pdf?",
        "Email questions to team.lead@example.org.",
        "Well... I think we should wait.",
        '"Are you sure?" he asked.',
        "The U.S. office opens next week.",
    ],
    "zh": [
        "好的！",
        "今天天气很好，我们去公园散步吧。",
        "你昨天看了那部电影吗？",
        "我觉得故事很感人，演员的表演也非常自然。",
        "下午三点，我们在图书馆门口见面；",
        "别忘了带上你的笔记本。",
        "他说：“这个问题需要再讨论一下。”",
        "然后大家都笑了。",
    ],
    "ja": [
        "こんにちは。",
        "今日はとても良い天気ですね。",
        "午後から友達と映画を見に行く予定です！",
        "あなたも一緒に来ませんか？",
        "駅の前で三時に待ち合わせをしましょう。",
        "「楽しみにしています」と彼女は言いました。",
    ],
    "ko": [
        "안녕하세요.",
        "오늘 날씨가 정말 좋네요!",
        "주말에 뭐 하실 계획이세요?",
        "저는 친구들과 함께 산에 갈 거예요.",
        "서울의 가을은 아름답고, 공기도 맑습니다.",
        "버전 3.2는 다음 주에 나옵니다.",
    ],
    "th": [
        "สวัสดีครับ",
        "วันนี้อากาศดีมาก",
        "เราจะไปเที่ยวทะเลกันไหม",
        "ผมคิดว่าเราควรออกเดินทางตอนเช้า",
        "เพราะรถจะไม่ติด",
        "ร้านอาหารริมทะเลอร่อยมาก",
        "และราคาก็ไม่แพงเลย",
    ],
    "ar": [
        "مرحبا بكم في المدينة.",
        "كيف حالك اليوم؟",
        "الطقس جميل جدا، والشمس مشرقة.",
        "سنذهب إلى السوق بعد الظهر؛ هل تريد أن تأتي معنا؟",
        "شكرا جزيلا.",
    ],
    "hi": [
        "नमस्ते, आप कैसे हैं?",
        "आज मौसम बहुत अच्छा है।",
        "हम शाम को बाज़ार जाएंगे।",
        "क्या आप हमारे साथ चलेंगे?",
        "यह किताब बहुत रोचक है, और मुझे इसकी कहानी पसंद आई।",
    ],
    "de": [
        "Guten Tag, Herr Müller!",
        "Das Treffen beginnt am 3. Oktober um 14.30 Uhr.",
        "Bitte bringen Sie z. B. Ihre Unterlagen mit.",
        "Die neue Version 2.0 ist seit gestern verfügbar.",
        "Haben Sie Fragen?",
        "Schreiben Sie an info@beispiel.de.",
    ],
    "fr": [
        "Bonjour !",
        "Comment allez-vous ?",
        "Le rendez-vous est fixé à 15 h 30, devant la gare.",
        "M. Dupont arrivera avec Mme Martin.",
        "Il a dit : « C'est une excellente idée. »",
        "Nous partirons ensuite vers Paris.",
    ],
    "ru": [
        "Привет!",
        "Как дела?",
        "Сегодня мы идём в театр, т.е. в Большой театр.",
        "Спектакль начнётся в 19.00.",
        "Билеты стоят 2500 руб. за место.",
        "До встречи!",
    ],
    "zh-en": [
        "我们今天用Python写一个demo，然后deploy到server上。",
        "这个API的latency大概是200ms左右！",
        "你觉得OK吗？",
        "Let's try it.",
        "如果有问题，我们再debug一下。",
    ],
}


def tokens(text: str, seed: int) -> list[str]:
    """Split like an LLM stream: pieces of 1–6 code points."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        k = rng.randint(1, 6)
        out.append(text[i:i + k])
        i += k
    return out


def stream(chunks: list[str], **params: int) -> list[Unit]:
    buffer = SentenceBuffer(**params)
    units: list[Unit] = []
    for chunk in chunks:
        units += buffer.feed(chunk)
    return units + buffer.end()


def check_lossless(raw: str, units: list[Unit]) -> None:
    pos = 0
    for unit in units:
        assert raw[pos:unit.start].strip() == ""
        assert unit.text == normalize_space(raw[unit.start:unit.end])
        pos = unit.end
    assert raw[pos:].strip() == ""


@pytest.mark.parametrize("lang", sorted(EXPECTED_SENTENCES))
def test_sentences_are_split_exactly(lang: str) -> None:
    text = SAMPLES[lang]
    assert [u.text for u in stream([text], **SENTENCE_MODE)] == EXPECTED_SENTENCES[lang]
    assert [u.text for u in stream(tokens(text, 1), **SENTENCE_MODE)] == EXPECTED_SENTENCES[lang]
    assert [u.text for u in stream(list(text), **SENTENCE_MODE)] == EXPECTED_SENTENCES[lang]


@pytest.mark.parametrize("lang", sorted(SAMPLES))
def test_default_buffer_packs_whole_sentences(lang: str) -> None:
    text = SAMPLES[lang]
    units = stream(tokens(text, 2))
    check_lossless(text, units)
    sentences = EXPECTED_SENTENCES[lang]
    joined = "".join("".join(sentences).split())
    # every unit after the first is a run of whole sentences (the first may end at a clause)
    for unit in units[1:]:
        assert "".join(unit.text.split()) in joined
        assert any(unit.text.endswith(s) for s in sentences), unit.text
    assert budget_length(units[0].text) <= 96  # the first unit is short: time to first audio


@pytest.mark.parametrize("lang", sorted(SAMPLES))
def test_2000_char_input_streamed_and_chunked(lang: str) -> None:
    text = long_text(lang)
    assert len(text) >= 2000
    whole = stream([text])
    check_lossless(text, whole)
    assert stream(tokens(text, 3)) == whole
    for unit in whole:
        assert budget_length(text[unit.start:unit.end]) <= 320
        assert budget_length(text[unit.start:unit.end]) <= 160 or lang == "th"
    # punctuated text: units end at punctuation (Thai: at a space between words), never mid-word
    for unit in whole[1:]:
        after = text[unit.end:unit.end + 1]
        assert not unit.text[-1].isalnum() or lang == "th" and (after == "" or after.isspace())

    chunks = split_text(text)
    check_lossless(text, chunks)
    sizes = [budget_length(text[u.start:u.end]) for u in chunks]
    assert max(sizes) <= 320
    assert min(sizes) >= 80, sizes  # balanced: no tiny tail
    assert sum(abs(s - 160) for s in sizes) / len(sizes) < 40, sizes
    for unit in chunks:
        assert unit.text[-1] in ".!?。！？；।؟»”" or lang == "th"


@pytest.mark.parametrize("text", [
    "The value of pi is 3.14159 and e is about 2.718 today.",
    "Mr. and Mrs. Smith met Dr. Jones and Prof. Lee at St. Mary's.",
    "Fruits, e.g. apples, and i.e. pears are sold in the U.S. and the U.K. markets.",
    "Wait... what did you say… about that thing?",
    "Upgrade from v1.2.3 to version 2.0.1 before Friday.",
    "Write to first.last@example.co.uk or visit https://example.com/a.b/c.d?x=1.5 now.",
    "J. R. R. Tolkien wrote the book in 1937.",
    "It costs approx. five dollars, i.e. not much.",
    "See No. 5 and pp. 12 of the report.",
    "He asked \"why?\" and left.",
    "The meeting is at 10:30 a.m. tomorrow.",
    "Das ist z. B. am 3. Oktober passiert.",
    "Это т.е. просто пример.",
    "版本3.14已经发布",
    "It is 3.5x faster!",
    "Call 1.800.555.0100 for help.",
])
def test_no_false_cuts(text: str) -> None:
    for chunks in ([text], list(text), tokens(text, 4)):
        assert [u.text for u in stream(chunks, **SENTENCE_MODE)] == [text]
    assert [u.text for u in split_text(text)] == [text]
    # a long run of such sentences is cut only between them
    many = " ".join([text] * 12)
    for unit in split_text(many, target_chars=100, max_chars=200):
        assert len(unit.text.replace(text, "").strip()) == 0, unit.text


@pytest.mark.parametrize(("text", "sentences"), [
    ("I love the sun. It is warm.", ["I love the sun.", "It is warm."]),
    ("The answer is 42. Then we stop.", ["The answer is 42.", "Then we stop."]),
    ("Go to example.com. Then click.", ["Go to example.com.", "Then click."]),
    ("Wow!!! Really?! Yes.", ["Wow!!!", "Really?!", "Yes."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("We bought apples, pears, etc. The rest was sold.", ["We bought apples, pears, etc.", "The rest was sold."]),
    ("Ich komme am Montag. Danach gehen wir.", ["Ich komme am Montag.", "Danach gehen wir."]),
    ("他说：“好的！”我们走吧。", ["他说：“好的！”", "我们走吧。"]),
    ("Er sagte: »Ich komme.« Dann ging er.", ["Er sagte: »Ich komme.«", "Dann ging er."]),
    ("Es ist gut. »Nein«, sagte er.", ["Es ist gut.", "»Nein«, sagte er."]),
    ("C'est fini. » Puis il partit.", ["C'est fini. »", "Puis il partit."]),
    ("Hello.你好。", ["Hello.", "你好。"]),
    ("We grew in 2023. March was cold.", ["We grew in 2023.", "March was cold."]),
    ("Vi ses den 24. december. Hej.", ["Vi ses den 24. december.", "Hej."]),
    ("Title line\n\nBody text here.", ["Title line", "Body text here."]),
    ("OK. Fine.", ["OK. Fine."]),  # "OK." alone is under min_chars: it waits and joins
])
def test_true_cuts(text: str, sentences: list[str]) -> None:
    for chunks in ([text], list(text), tokens(text, 5)):
        assert [u.text for u in stream(chunks, **SENTENCE_MODE)] == sentences
