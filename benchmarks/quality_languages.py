"""Recall in other languages than English, at the package defaults (issue: CJK users).

Not a test: the script behind the "Other languages" table of `docs/quality.md`. Each
language is one user (resource) of a fresh `SemanticRecall.local` store (SQLite with FTS5,
embedded Chroma, the local MiniLM model, hybrid search): six facts, each told in its own
conversation with the assistant's reply, then, in a new conversation, a question about
each fact, three small-talk turns and two questions about something never discussed.
English is the baseline, in the same run. Measured per language:

- **top-1**: `search` ranks the fact first;
- **in block**: recall gives the model a memory block holding the fact;
- **facts in block**: how many of the six facts the block holds, on average (the
  question is about one of them; the rest is context the model did not need);
- **small talk silent**, **off-topic silent**: recall adds nothing.

The sentences are our own, written for this purpose (the same six facts in each
language); the small talk is ordinary thanks, "ok" and greetings.

Usage::

    .venv/bin/python benchmarks/quality_languages.py [LANGUAGE ...]
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass

from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall

Facts = list[tuple[str, str]]
Language = tuple[Facts, list[tuple[str, int]], list[str], list[str]]

LANGUAGES: dict[str, Language] = {}
"""Language -> (facts: (user, assistant), questions: (text, fact index), small talk,
off-topic questions)."""
LANGUAGES["en"] = (
    [
        ("I'm allergic to peanuts, please remember that.", "Noted, no peanuts."),
        ("My daughter Mia just turned five last week.", "Happy birthday to Mia!"),
        (
            "We are moving to Berlin next month for my new job.",
            "Exciting, good luck with the move.",
        ),
        ("My car is a red Toyota Corolla from 2015.", "A reliable car."),
        ("Our project stores everything in PostgreSQL 16.", "Good choice."),
        ("My dog is called Biscuit, he is a beagle.", "Cute name!"),
    ],
    [
        ("What am I allergic to?", 0),
        ("How old is my daughter now?", 1),
        ("Which city are we moving to?", 2),
        ("What colour is my car?", 3),
        ("Which database does our project use?", 4),
        ("What's my dog's name?", 5),
    ],
    ["thanks!", "ok 👍", "hello"],
    ["How do I bake sourdough bread?", "What is the capital of Australia?"],
)
LANGUAGES["zh"] = (
    [
        ("我对花生过敏，请记住。", "好的，我记住了，不吃花生。"),
        ("我女儿小美上周刚满五岁。", "祝小美生日快乐！"),
        ("因为新工作，我们下个月要搬到柏林。", "太好了，祝搬家顺利。"),
        ("我的车是一辆2015年的红色丰田卡罗拉。", "很可靠的车。"),
        ("我们的项目把所有数据都存在PostgreSQL 16里。", "不错的选择。"),
        ("我的狗叫饼干，是一只比格犬。", "名字真可爱！"),
    ],
    [
        ("我对什么过敏？", 0),
        ("我女儿现在几岁了？", 1),
        ("我们要搬到哪个城市？", 2),
        ("我的车是什么颜色的？", 3),
        ("我们的项目用什么数据库？", 4),
        ("我的狗叫什么名字？", 5),
    ],
    ["谢谢!", "好的", "你好"],
    ["怎么烤酸面包？", "澳大利亚的首都是哪里？"],
)
LANGUAGES["ja"] = (
    [
        (
            "私はピーナッツアレルギーです。覚えておいてください。",
            "承知しました。ピーナッツは避けます。",
        ),
        ("娘のミアは先週五歳になりました。", "ミアちゃん、お誕生日おめでとう！"),
        ("新しい仕事のため、来月ベルリンに引っ越します。", "素晴らしいですね。引っ越し頑張って。"),
        ("私の車は2015年式の赤いトヨタ・カローラです。", "信頼できる車ですね。"),
        ("私たちのプロジェクトはすべてPostgreSQL 16に保存しています。", "良い選択です。"),
        ("私の犬の名前はビスケットで、ビーグルです。", "かわいい名前！"),
    ],
    [
        ("私は何のアレルギーがありますか？", 0),
        ("娘は今何歳ですか？", 1),
        ("私たちはどの都市に引っ越しますか？", 2),
        ("私の車は何色ですか？", 3),
        ("私たちのプロジェクトはどのデータベースを使っていますか？", 4),
        ("私の犬の名前は何ですか？", 5),
    ],
    ["ありがとう！", "了解", "こんにちは"],
    ["サワードウパンの焼き方は？", "オーストラリアの首都はどこですか？"],
)
LANGUAGES["ko"] = (
    [
        ("저는 땅콩 알레르기가 있어요. 기억해 주세요.", "알겠습니다. 땅콩은 피할게요."),
        ("제 딸 미아가 지난주에 다섯 살이 됐어요.", "미아 생일 축하해요!"),
        ("새 직장 때문에 다음 달에 베를린으로 이사 가요.", "멋지네요. 이사 잘 하세요."),
        ("제 차는 2015년식 빨간색 도요타 코롤라예요.", "믿을 만한 차네요."),
        ("우리 프로젝트는 모든 데이터를 PostgreSQL 16에 저장해요.", "좋은 선택이에요."),
        ("제 강아지 이름은 비스킷이고 비글이에요.", "귀여운 이름이네요!"),
    ],
    [
        ("제가 무슨 알레르기가 있죠?", 0),
        ("제 딸은 지금 몇 살이에요?", 1),
        ("우리는 어느 도시로 이사 가나요?", 2),
        ("제 차는 무슨 색이에요?", 3),
        ("우리 프로젝트는 어떤 데이터베이스를 써요?", 4),
        ("제 강아지 이름이 뭐예요?", 5),
    ],
    ["고마워요!", "네 알겠어요", "안녕하세요"],
    ["사워도우 빵은 어떻게 굽나요?", "호주의 수도는 어디예요?"],
)
LANGUAGES["mixed"] = (
    [
        ("我对 peanuts 过敏，记住哦。", "OK，不吃 peanuts。"),
        ("我女儿 Mia 上周刚满 5 岁。", "Happy birthday to Mia！"),
        ("因为新 job，我们 next month 搬去 Berlin。", "好的，good luck。"),
        ("我的车是一辆 red Toyota Corolla，2015 年的。", "很 reliable。"),
        ("我们的 project 用 PostgreSQL 16 存数据。", "Good choice。"),
        ("我的狗叫 Biscuit，是 beagle。", "名字很 cute！"),
    ],
    [
        ("我对什么 allergic？", 0),
        ("Mia 现在几岁？", 1),
        ("我们搬去哪个 city？", 2),
        ("我的 car 是什么颜色？", 3),
        ("我们 project 用哪个 database？", 4),
        ("我的 dog 叫什么？", 5),
    ],
    ["谢谢 thanks!", "ok 👍", "hi 你好"],
    ["怎么 bake sourdough？", "Australia 的首都是哪里？"],
)
LANGUAGES["ar"] = (
    [
        ("أنا أعاني من حساسية الفول السوداني، من فضلك تذكر ذلك.", "حسنا، لا فول سوداني."),
        ("ابنتي ميا بلغت الخامسة من عمرها الأسبوع الماضي.", "عيد ميلاد سعيد لميا!"),
        ("سننتقل إلى برلين الشهر القادم بسبب عملي الجديد.", "رائع، بالتوفيق في الانتقال."),
        ("سيارتي تويوتا كورولا حمراء موديل 2015.", "سيارة موثوقة."),
        ("مشروعنا يخزن كل البيانات في PostgreSQL 16.", "اختيار جيد."),
        ("كلبي اسمه بسكويت، وهو من نوع بيغل.", "اسم لطيف!"),
    ],
    [
        ("ما الذي أعاني من حساسية منه؟", 0),
        ("كم عمر ابنتي الآن؟", 1),
        ("إلى أي مدينة سننتقل؟", 2),
        ("ما لون سيارتي؟", 3),
        ("ما قاعدة البيانات التي يستخدمها مشروعنا؟", 4),
        ("ما اسم كلبي؟", 5),
    ],
    ["شكرا!", "حسنا", "مرحبا"],
    ["كيف أخبز خبز العجين المخمر؟", "ما هي عاصمة أستراليا؟"],
)
LANGUAGES["he"] = (
    [
        ("אני אלרגי לבוטנים, בבקשה תזכור את זה.", "בסדר, בלי בוטנים."),
        ("הבת שלי מיה בדיוק מלאו לה חמש בשבוע שעבר.", "יום הולדת שמח למיה!"),
        ("אנחנו עוברים לברלין בחודש הבא בגלל העבודה החדשה שלי.", "מרגש, בהצלחה במעבר."),
        ("המכונית שלי היא טויוטה קורולה אדומה משנת 2015.", "מכונית אמינה."),
        ("הפרויקט שלנו שומר הכל ב-PostgreSQL 16.", "בחירה טובה."),
        ("לכלב שלי קוראים ביסקוויט, הוא ביגל.", "שם חמוד!"),
    ],
    [
        ("למה אני אלרגי?", 0),
        ("בת כמה הבת שלי עכשיו?", 1),
        ("לאיזו עיר אנחנו עוברים?", 2),
        ("באיזה צבע המכונית שלי?", 3),
        ("באיזה מסד נתונים הפרויקט שלנו משתמש?", 4),
        ("איך קוראים לכלב שלי?", 5),
    ],
    ["תודה!", "בסדר", "שלום"],
    ["איך אופים לחם מחמצת?", "מה בירת אוסטרליה?"],
)
LANGUAGES["fr"] = (
    [
        ("Je suis allergique aux cacahuètes, souviens-toi de ça.", "D'accord, pas de cacahuètes."),
        ("Ma fille Mia a eu cinq ans la semaine dernière.", "Joyeux anniversaire à Mia !"),
        (
            "Nous déménageons à Berlin le mois prochain pour mon nouveau travail.",
            "Génial, bon déménagement.",
        ),
        ("Ma voiture est une Toyota Corolla rouge de 2015.", "Une voiture fiable."),
        ("Notre projet stocke tout dans PostgreSQL 16.", "Bon choix."),
        ("Mon chien s'appelle Biscuit, c'est un beagle.", "Joli nom !"),
    ],
    [
        ("À quoi suis-je allergique ?", 0),
        ("Quel âge a ma fille maintenant ?", 1),
        ("Dans quelle ville déménageons-nous ?", 2),
        ("De quelle couleur est ma voiture ?", 3),
        ("Quelle base de données notre projet utilise-t-il ?", 4),
        ("Comment s'appelle mon chien ?", 5),
    ],
    ["merci !", "d'accord", "bonjour"],
    ["Comment faire du pain au levain ?", "Quelle est la capitale de l'Australie ?"],
)
LANGUAGES["de"] = (
    [
        ("Ich bin allergisch gegen Erdnüsse, bitte merk dir das.", "Alles klar, keine Erdnüsse."),
        ("Meine Tochter Mia ist letzte Woche fünf geworden.", "Alles Gute zum Geburtstag, Mia!"),
        (
            "Wir ziehen nächsten Monat wegen meines neuen Jobs nach Berlin.",
            "Spannend, viel Erfolg beim Umzug.",
        ),
        ("Mein Auto ist ein roter Toyota Corolla von 2015.", "Ein zuverlässiges Auto."),
        ("Unser Projekt speichert alles in PostgreSQL 16.", "Gute Wahl."),
        ("Mein Hund heißt Keks, er ist ein Beagle.", "Süßer Name!"),
    ],
    [
        ("Wogegen bin ich allergisch?", 0),
        ("Wie alt ist meine Tochter jetzt?", 1),
        ("In welche Stadt ziehen wir?", 2),
        ("Welche Farbe hat mein Auto?", 3),
        ("Welche Datenbank nutzt unser Projekt?", 4),
        ("Wie heißt mein Hund?", 5),
    ],
    ["danke!", "okay", "hallo"],
    ["Wie backe ich Sauerteigbrot?", "Was ist die Hauptstadt von Australien?"],
)
LANGUAGES["emoji"] = (
    [
        ("🥜🚫😵", "👍"),
        ("👧🎂5️⃣", "🎉"),
        ("🚚➡️🇩🇪", "🍀"),
        ("🚗🔴", "👌"),
        ("🐘🗄️", "👍"),
        ("🐶🍪", "😍"),
    ],
    [("🥜❓", 0), ("👧❓", 1), ("🚚❓", 2), ("🚗❓", 3), ("🐘❓", 4), ("🐶❓", 5)],
    ["🙏", "👍", "👋"],
    ["🍞❓", "🇦🇺❓"],
)


@dataclass(frozen=True)
class Row:
    """One language's results (counts out of `questions`, `small_talk`, `off_topic`)."""

    language: str
    questions: int
    top1: int
    in_block: int
    facts_in_block: float
    small_talk: int
    small_talk_silent: int
    off_topic: int
    off_topic_silent: int


def measure(memory: SemanticRecall, language: str) -> Row:
    """Store `language`'s facts for a user of its own, then ask its questions."""
    facts, questions, small_talk, off_topic = LANGUAGES[language]
    user = f"user-{language}"
    for n, (said, reply) in enumerate(facts):
        memory.index(
            [HumanMessage(said), AIMessage(reply)], thread_id=f"{language}-{n}", resource_id=user
        )

    def block(text: str) -> str | None:
        out = memory.recall([HumanMessage(text)], thread_id=f"{language}-new", resource_id=user)
        return str(out[0].content) if len(out) > 1 else None

    top1 = in_block = facts_seen = 0
    for question, fact in questions:
        hits = memory.search(question, resource_id=user)
        top1 += bool(hits) and hits[0].message.text == facts[fact][0]
        given = block(question) or ""
        in_block += facts[fact][0] in given
        facts_seen += sum(said in given for said, _ in facts)
    return Row(
        language,
        len(questions),
        top1,
        in_block,
        facts_seen / len(questions),
        len(small_talk),
        sum(block(turn) is None for turn in small_talk),
        len(off_topic),
        sum(block(turn) is None for turn in off_topic),
    )


def main(languages: list[str]) -> None:
    """Print the table (English first: the baseline)."""
    print("| language | top-1 | in block | facts in block | small talk silent | off-topic silent |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder, SemanticRecall.local(folder) as memory:
        for language in languages:
            r = measure(memory, language)
            print(
                f"| {r.language} | {r.top1}/{r.questions} | {r.in_block}/{r.questions} | "
                f"{r.facts_in_block:.1f} / {len(LANGUAGES[language][0])} | "
                f"{r.small_talk_silent}/{r.small_talk} | {r.off_topic_silent}/{r.off_topic} |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:] or list(LANGUAGES))
