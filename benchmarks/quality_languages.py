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
- **small talk silent**, **off-topic silent**: recall adds nothing;
- **recalled for off-topic**: how many stored messages the block holds for a question
  about something never discussed, on average (the budget is spent in proportion to the
  evidence, so a weak match may bring one or two).

The sentences are our own, written for this purpose (the same six facts in each
language); the small talk is ordinary thanks, "ok" and greetings.

Usage::

    .venv/bin/python benchmarks/quality_languages.py [--busy] [LANGUAGE ...]
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
    ["How do I remove a wine stain from a carpet?", "How do I descale a kettle?"],
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
    ["怎么去除地毯上的酒渍？", "水壶怎么除水垢？"],
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
    [
        "カーペットのワインのしみはどうやって落としますか？",
        "やかんの水垢はどうやって落としますか？",
    ],
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
    ["카펫에 묻은 와인 얼룩은 어떻게 지워요?", "주전자 물때는 어떻게 없애요?"],
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
    ["怎么去除 carpet 上的 wine 渍？", "kettle 的水垢怎么除？"],
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
    ["كيف أزيل بقعة نبيذ من السجادة؟", "كيف أزيل الترسبات الكلسية من الغلاية؟"],
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
    ["איך מורידים כתם יין מהשטיח?", "איך מורידים אבנית מהקומקום?"],
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
    [
        "Comment enlever une tache de vin sur un tapis ?",
        "Comment détartrer une bouilloire ?",
    ],
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
    [
        "Wie entferne ich einen Weinfleck vom Teppich?",
        "Wie entkalke ich einen Wasserkocher?",
    ],
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


FILLER: dict[str, list[str]] = {}
"""Language -> other things the same user asked about in the same language, each in a
conversation of its own (everyday questions, translations of everyday sentences): what a
memory holds besides the facts. `--busy` adds them to the store."""
FILLER["en"] = [
    "What's the weather usually like in Lisbon in March?",
    "Help me write a cover letter for a data analyst job.",
    "How do I reverse a list in Python?",
    "Recommend a science fiction novel for a long flight.",
    "Why is the sky blue?",
    "Give me three ideas for a team-building afternoon.",
    "How many grams of sugar are in a teaspoon?",
    "What's the plot of Hamlet in two sentences?",
    "Translate 'where is the train station' into Italian.",
    "Is it safe to run a dishwasher overnight?",
    "Summarise the causes of the French Revolution.",
    "What's a good name for a bakery?",
    "How do solar panels work?",
    "Suggest a stretching routine for runners.",
    "What is the tallest mountain in Africa?",
    "Explain recursion to a ten-year-old.",
]
FILLER["zh"] = [
    "去机场的巴士每二十分钟从主广场出发一班。",
    "溏心蛋要煮多久？",
    "博物馆的新展厅专门展示中世纪挂毯。",
    "最近一次更新后我的笔记本电脑老是重启。",
    "太阳系里哪些行星有光环？",
    "这个食谱需要两杯面粉和一小撮盐。",
    "停车场午夜以后收费翻倍。",
    "季度报告显示运营成本略有上升。",
    "我得在夏天之前更新护照。",
    "葡萄牙语的晚安怎么说？",
    "管弦乐团周五将演奏西贝柳斯的交响曲。",
    "番茄每天至少需要六小时的阳光。",
    "你能解释一下复利是怎么算的吗？",
    "马拉松路线沿着河边穿过老城区。",
    "邻居家的狗一到送信的时候就叫。",
    "腰背僵硬适合做什么拉伸？",
]
FILLER["ja"] = [
    "空港行きのバスは中央広場から二十分おきに出ています。",
    "半熟卵は何分ゆでればいいですか？",
    "博物館の新館は中世のタペストリー専用です。",
    "最新のアップデート以来、ノートパソコンが再起動を繰り返します。",
    "太陽系で環がある惑星はどれですか？",
    "このレシピには小麦粉二カップと塩ひとつまみが必要です。",
    "駐車場は深夜零時を過ぎると料金が二倍になります。",
    "四半期報告では運営費がわずかに増えています。",
    "夏までにパスポートを更新しないといけません。",
    "ポルトガル語でおやすみは何と言いますか？",
    "オーケストラは金曜日にシベリウスの交響曲を演奏します。",
    "トマトは一日に少なくとも六時間の日光が必要です。",
    "複利の仕組みを説明してくれますか？",
    "マラソンのコースは川沿いを通って旧市街を抜けます。",
    "隣の犬は郵便が来るたびに吠えます。",
    "腰のこりに良いストレッチは何ですか？",
]
FILLER["ko"] = [
    "공항 가는 버스는 중앙 광장에서 이십 분마다 출발해요.",
    "반숙 달걀은 몇 분 삶아야 하나요?",
    "박물관의 새 전시관은 중세 태피스트리 전용이에요.",
    "최신 업데이트 이후로 노트북이 계속 재부팅돼요.",
    "태양계에서 고리가 있는 행성은 어떤 거예요?",
    "이 요리법에는 밀가루 두 컵과 소금 한 꼬집이 필요해요.",
    "주차장은 자정 이후에 요금이 두 배예요.",
    "분기 보고서에 운영 비용이 조금 올랐다고 나와요.",
    "여름 전에 여권을 갱신해야 해요.",
    "포르투갈어로 잘 자라는 어떻게 말해요?",
    "오케스트라가 금요일에 시벨리우스 교향곡을 연주해요.",
    "토마토는 하루에 최소 여섯 시간 햇빛이 필요해요.",
    "복리가 어떻게 계산되는지 설명해 줄래요?",
    "마라톤 코스는 강을 따라 구시가지를 지나가요.",
    "옆집 강아지는 우편물이 올 때마다 짖어요.",
    "허리가 뻣뻣할 때 좋은 스트레칭이 뭐예요?",
]
FILLER["ar"] = [
    "تغادر الحافلة إلى المطار كل عشرين دقيقة من الساحة الرئيسية.",
    "كم دقيقة أسلق البيضة لتبقى الصفار طريا؟",
    "الجناح الجديد في المتحف مخصص للمنسوجات القروسطية.",
    "حاسوبي المحمول يعيد التشغيل باستمرار بعد التحديث الأخير.",
    "ما الكواكب في المجموعة الشمسية التي لها حلقات؟",
    "تحتاج الوصفة إلى كوبين من الدقيق ورشة ملح.",
    "يضاعف موقف السيارات الرسوم بعد منتصف الليل.",
    "يظهر التقرير الفصلي ارتفاعا طفيفا في تكاليف التشغيل.",
    "يجب أن أجدد جواز سفري قبل الصيف.",
    "كيف تقول تصبح على خير بالبرتغالية؟",
    "ستعزف الأوركسترا سيمفونية لسيبيليوس يوم الجمعة.",
    "تنمو الطماطم أفضل مع ست ساعات من الشمس يوميا على الأقل.",
    "هل يمكنك شرح كيف تعمل الفائدة المركبة؟",
    "يمر مسار الماراثون على طول النهر وعبر البلدة القديمة.",
    "كلب جارنا ينبح كلما وصل البريد.",
    "ما التمرين المناسب لأسفل الظهر المتيبس؟",
]
FILLER["he"] = [
    "האוטובוס לשדה התעופה יוצא כל עשרים דקות מהכיכר המרכזית.",
    "כמה זמן צריך לבשל ביצה רכה?",
    "האגף החדש במוזיאון מוקדש לשטיחי קיר מימי הביניים.",
    "המחשב הנייד שלי ממשיך לאתחל את עצמו אחרי העדכון האחרון.",
    "לאילו כוכבי לכת במערכת השמש יש טבעות?",
    "המתכון דורש שתי כוסות קמח וקורט מלח.",
    "החניון גובה כפול אחרי חצות.",
    "הדוח הרבעוני מראה עלייה קטנה בעלויות התפעול.",
    "אני צריך לחדש את הדרכון לפני הקיץ.",
    "איך אומרים לילה טוב בפורטוגזית?",
    "התזמורת תנגן סימפוניה של סיבליוס ביום שישי.",
    "עגבניות גדלות הכי טוב עם שש שעות שמש ביום לפחות.",
    "אתה יכול להסביר איך עובדת ריבית דריבית?",
    "מסלול המרתון עובר לאורך הנהר ודרך העיר העתיקה.",
    "הכלב של השכנים נובח בכל פעם שהדואר מגיע.",
    "איזו מתיחה טובה לגב תחתון תפוס?",
]
FILLER["fr"] = [
    "Le bus pour l'aéroport part toutes les vingt minutes de la place principale.",
    "Combien de temps faut-il cuire un œuf à la coque ?",
    "La nouvelle aile du musée est consacrée aux tapisseries médiévales.",
    "Mon ordinateur portable redémarre sans cesse depuis la dernière mise à jour.",
    "Quelles planètes du système solaire ont des anneaux ?",
    "La recette demande deux tasses de farine et une pincée de sel.",
    "Le parking coûte le double après minuit.",
    "Le rapport trimestriel montre une légère hausse des coûts d'exploitation.",
    "Je dois renouveler mon passeport avant l'été.",
    "Comment dit-on bonne nuit en portugais ?",
    "L'orchestre jouera une symphonie de Sibelius vendredi.",
    "Les tomates poussent mieux avec au moins six heures de soleil par jour.",
    "Peux-tu m'expliquer comment fonctionnent les intérêts composés ?",
    "Le parcours du marathon longe la rivière et traverse la vieille ville.",
    "Le chien du voisin aboie chaque fois que le courrier arrive.",
    "Quel étirement est bon pour le bas du dos raide ?",
]
FILLER["de"] = [
    "Der Bus zum Flughafen fährt alle zwanzig Minuten vom Hauptplatz ab.",
    "Wie lange muss ich ein Ei für ein weiches Eigelb kochen?",
    "Der neue Flügel des Museums ist mittelalterlichen Wandteppichen gewidmet.",
    "Mein Laptop startet seit dem letzten Update ständig neu.",
    "Welche Planeten im Sonnensystem haben Ringe?",
    "Das Rezept verlangt zwei Tassen Mehl und eine Prise Salz.",
    "Das Parkhaus kostet nach Mitternacht das Doppelte.",
    "Der Quartalsbericht zeigt einen leichten Anstieg der Betriebskosten.",
    "Ich muss meinen Reisepass vor dem Sommer verlängern.",
    "Wie sagt man gute Nacht auf Portugiesisch?",
    "Das Orchester spielt am Freitag eine Sinfonie von Sibelius.",
    "Tomaten wachsen am besten mit mindestens sechs Stunden Sonne am Tag.",
    "Kannst du erklären, wie Zinseszinsen funktionieren?",
    "Die Marathonstrecke führt am Fluss entlang und durch die Altstadt.",
    "Der Hund unseres Nachbarn bellt, wann immer die Post kommt.",
    "Welche Dehnübung hilft bei einem steifen unteren Rücken?",
]
FILLER["es"] = [
    "El autobús al aeropuerto sale cada veinte minutos de la plaza principal.",
    "¿Cuánto tiempo hay que hervir un huevo para que la yema quede blanda?",
    "El ala nueva del museo está dedicada a los tapices medievales.",
    "Mi portátil se reinicia sin parar desde la última actualización.",
    "¿Qué planetas del sistema solar tienen anillos?",
    "La receta pide dos tazas de harina y una pizca de sal.",
    "El aparcamiento cobra el doble después de medianoche.",
    "El informe trimestral muestra un pequeño aumento de los costes operativos.",
    "Tengo que renovar el pasaporte antes del verano.",
    "¿Cómo se dice buenas noches en portugués?",
    "La orquesta tocará una sinfonía de Sibelius el viernes.",
    "Los tomates crecen mejor con al menos seis horas de sol al día.",
    "¿Puedes explicarme cómo funciona el interés compuesto?",
    "La ruta del maratón va junto al río y atraviesa el casco antiguo.",
    "El perro del vecino ladra cada vez que llega el correo.",
    "¿Qué estiramiento va bien para la zona lumbar rígida?",
]
FILLER["mixed"] = FILLER["zh"]


@dataclass(frozen=True)
class Row:
    """One language's results (counts out of `questions`, `small_talk`, `off_topic`)."""

    language: str
    questions: int
    top1: int
    in_block: int
    facts_in_block: float
    filler_in_block: float
    small_talk: int
    small_talk_silent: int
    off_topic: int
    off_topic_silent: int
    off_topic_recalled: float
    """Stored messages the block holds for an off-topic question, on average."""


def measure(memory: SemanticRecall, language: str, *, busy: bool = False) -> Row:
    """Store `language`'s facts for a user of its own, then ask its questions.

    `busy`: the user asked about `FILLER[language]` too (each in its own conversation).
    """
    facts, questions, small_talk, off_topic = LANGUAGES[language]
    filler = FILLER.get(language, []) if busy else []
    user = f"user-{language}{'-busy' if busy else ''}"
    for n, asked in enumerate(filler):
        memory.index([HumanMessage(asked)], thread_id=f"{user}-filler-{n}", resource_id=user)
    for n, (said, reply) in enumerate(facts):
        memory.index(
            [HumanMessage(said), AIMessage(reply)], thread_id=f"{user}-{n}", resource_id=user
        )

    def block(text: str) -> str | None:
        out = memory.recall([HumanMessage(text)], thread_id=f"{user}-new", resource_id=user)
        return str(out[0].content) if len(out) > 1 else None

    stored = [text for pair in facts for text in pair] + filler

    def recalled(given: str | None) -> int:
        return sum(text in given for text in stored) if given else 0

    top1 = in_block = facts_seen = filler_seen = 0
    for question, fact in questions:
        hits = memory.search(question, resource_id=user)
        top1 += bool(hits) and hits[0].message.text == facts[fact][0]
        given = block(question) or ""
        in_block += facts[fact][0] in given
        facts_seen += sum(said in given for said, _ in facts)
        filler_seen += sum(asked in given for asked in filler)
    return Row(
        language,
        len(questions),
        top1,
        in_block,
        facts_seen / len(questions),
        filler_seen / len(questions),
        len(small_talk),
        sum(block(turn) is None for turn in small_talk),
        len(off_topic),
        sum(block(turn) is None for turn in off_topic),
        sum(recalled(block(turn)) for turn in off_topic) / len(off_topic),
    )


def main(languages: list[str], *, busy: bool) -> None:
    """Print the table (English first: the baseline)."""
    print(
        "| language | top-1 | in block | facts in block | other questions in block "
        "| small talk silent | off-topic silent | recalled for off-topic |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder, SemanticRecall.local(folder) as memory:
        for language in languages:
            r = measure(memory, language, busy=busy)
            print(
                f"| {r.language} | {r.top1}/{r.questions} | {r.in_block}/{r.questions} | "
                f"{r.facts_in_block:.1f} / {len(LANGUAGES[language][0])} | "
                f"{r.filler_in_block:.1f} / {len(FILLER.get(language, [])) if busy else 0} | "
                f"{r.small_talk_silent}/{r.small_talk} | {r.off_topic_silent}/{r.off_topic} | "
                f"{r.off_topic_recalled:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main([a for a in arguments if a != "--busy"] or list(LANGUAGES), busy="--busy" in arguments)
