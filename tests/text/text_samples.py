"""Real sentences per language for the text tests and bench/text_split.py (written for this project)."""

from __future__ import annotations

SAMPLES: dict[str, str] = {
    "en": (
        "Sure! Dr. Smith arrived at 9:30 a.m. on Monday. She said the results were good, e.g. a 3.5% "
        "improvement over version 2.1.4! Did you read the report at https://example.com/report.v2.pdf? "
        "Email questions to team.lead@example.org. Well... I think we should wait. \"Are you sure?\" he "
        "asked. The U.S. office opens next week."
    ),
    "zh": (
        "好的！今天天气很好，我们去公园散步吧。你昨天看了那部电影吗？我觉得故事很感人，演员的表演也非常自然。"
        "下午三点，我们在图书馆门口见面；别忘了带上你的笔记本。他说：“这个问题需要再讨论一下。”然后大家都笑了。"
    ),
    "ja": (
        "こんにちは。今日はとても良い天気ですね。午後から友達と映画を見に行く予定です！あなたも一緒に来ませんか？"
        "駅の前で三時に待ち合わせをしましょう。「楽しみにしています」と彼女は言いました。"
    ),
    "ko": (
        "안녕하세요. 오늘 날씨가 정말 좋네요! 주말에 뭐 하실 계획이세요? 저는 친구들과 함께 산에 갈 거예요. "
        "서울의 가을은 아름답고, 공기도 맑습니다. 버전 3.2는 다음 주에 나옵니다."
    ),
    "th": (
        "สวัสดีครับ วันนี้อากาศดีมาก เราจะไปเที่ยวทะเลกันไหม ผมคิดว่าเราควรออกเดินทางตอนเช้า เพราะรถจะไม่ติด "
        "ร้านอาหารริมทะเลอร่อยมาก และราคาก็ไม่แพงเลย"
    ),
    "ar": (
        "مرحبا بكم في المدينة. كيف حالك اليوم؟ الطقس جميل جدا، والشمس مشرقة. سنذهب إلى السوق بعد الظهر؛ "
        "هل تريد أن تأتي معنا؟ شكرا جزيلا."
    ),
    "hi": (
        "नमस्ते, आप कैसे हैं? आज मौसम बहुत अच्छा है। हम शाम को बाज़ार जाएंगे। क्या आप हमारे साथ चलेंगे? "
        "यह किताब बहुत रोचक है, और मुझे इसकी कहानी पसंद आई।"
    ),
    "de": (
        "Guten Tag, Herr Müller! Das Treffen beginnt am 3. Oktober um 14.30 Uhr. Bitte bringen Sie z. B. "
        "Ihre Unterlagen mit. Die neue Version 2.0 ist seit gestern verfügbar. Haben Sie Fragen? "
        "Schreiben Sie an info@beispiel.de."
    ),
    "fr": (
        "Bonjour ! Comment allez-vous ? Le rendez-vous est fixé à 15 h 30, devant la gare. M. Dupont "
        "arrivera avec Mme Martin. Il a dit : « C'est une excellente idée. » Nous partirons ensuite vers Paris."
    ),
    "ru": (
        "Привет! Как дела? Сегодня мы идём в театр, т.е. в Большой театр. Спектакль начнётся в 19.00. "
        "Билеты стоят 2500 руб. за место. До встречи!"
    ),
    "zh-en": (
        "我们今天用Python写一个demo，然后deploy到server上。这个API的latency大概是200ms左右！你觉得OK吗？"
        "Let's try it. 如果有问题，我们再debug一下。"
    ),
}

# More sentences per language, for the 2,000-character inputs (repeated with the sample to the length).
MORE: dict[str, str] = {
    "en": (
        "The committee met on Tuesday to discuss the budget for next year. After a long debate, they agreed "
        "to increase funding for public libraries by 12.5 percent. Critics argued that the money would be "
        "better spent on roads; supporters replied that libraries serve everyone. Mrs. Jones, who chairs "
        "the committee, promised a final vote in March."
    ),
    "zh": (
        "这座城市有很多历史悠久的建筑，每年都吸引大量游客前来参观。春天的时候，河边的樱花全部盛开，景色十分美丽。"
        "当地人喜欢在周末去市场买新鲜的蔬菜和水果，然后回家做一顿丰盛的晚饭。"
    ),
    "ja": (
        "この町には古い神社やお寺がたくさんあります。春になると、川沿いの桜が満開になり、多くの観光客が訪れます。"
        "地元の人々は週末に市場で新鮮な野菜や果物を買うのが好きです。"
    ),
    "ko": (
        "이 도시에는 오래된 건물이 많이 있습니다. 봄이 되면 강가의 벚꽃이 활짝 피어 많은 관광객이 찾아옵니다. "
        "주말에는 시장에서 신선한 채소와 과일을 사는 사람들이 많습니다."
    ),
    "th": (
        "เมืองนี้มีวัดเก่าแก่หลายแห่ง นักท่องเที่ยวจำนวนมากมาเยี่ยมชมทุกปี ในฤดูร้อนอากาศจะร้อนมาก "
        "แต่ตอนเย็นลมทะเลพัดเย็นสบาย คนในท้องถิ่นชอบไปตลาดในวันหยุดสุดสัปดาห์"
    ),
    "ar": (
        "تضم هذه المدينة العديد من المباني التاريخية، ويزورها آلاف السياح كل عام. في الربيع تزهر الأشجار على "
        "ضفاف النهر، ويصبح المنظر رائعا. يحب السكان الذهاب إلى السوق في عطلة نهاية الأسبوع."
    ),
    "hi": (
        "इस शहर में कई पुरानी इमारतें हैं, और हर साल हज़ारों पर्यटक यहाँ आते हैं। वसंत में नदी के किनारे फूल "
        "खिलते हैं। लोग सप्ताहांत में बाज़ार से ताज़ी सब्ज़ियाँ और फल खरीदना पसंद करते हैं।"
    ),
    "de": (
        "Die Stadt hat viele historische Gebäude, die jedes Jahr Tausende von Besuchern anziehen. Im Frühling "
        "blühen die Bäume am Flussufer, und die Cafés stellen ihre Tische nach draußen. Am Wochenende kaufen "
        "die Einwohner gern frisches Obst und Gemüse auf dem Markt, usw. Danach trifft man sich zum Kaffee."
    ),
    "fr": (
        "La ville compte de nombreux bâtiments historiques qui attirent chaque année des milliers de "
        "visiteurs. Au printemps, les arbres fleurissent le long du fleuve ; les cafés sortent leurs tables. "
        "Le week-end, les habitants aiment acheter des fruits et des légumes frais au marché."
    ),
    "ru": (
        "В этом городе много исторических зданий, которые каждый год привлекают тысячи туристов. Весной на "
        "берегу реки цветут деревья, и кафе выносят столики на улицу. По выходным жители любят покупать "
        "свежие овощи и фрукты на рынке."
    ),
    "zh-en": (
        "这个project的deadline是下周五，所以我们需要加快进度。首先要fix几个bug，然后写unit test。"
        "Meeting安排在明天上午十点，记得带上你的laptop。The demo went well, 大家都很满意。"
    ),
}


def long_text(lang: str, min_chars: int = 2000) -> str:
    """At least min_chars code points of real sentences in lang."""
    parts: list[str] = []
    size = 0
    while size < min_chars:
        for piece in (SAMPLES[lang], MORE[lang]):
            parts.append(piece)
            size += len(piece) + 1
    sep = "" if lang in ("zh", "ja") else " "
    return sep.join(parts)
