"""Documents for knowledge-base tests, written by the tests: several topics, English and Chinese, a
multi-page PDF, markdown, HTML, .docx and source code, with 30 questions whose answers are known.

Each question names the file and a snippet that only the passage holding the answer contains.
Distractor documents on neighbouring topics (another board, another town, another tea) make the
ranking meaningful: the right passage must beat passages that share most of its words.
"""

from __future__ import annotations

from pathlib import Path

from tests.app.pdf_samples import pages_pdf

ORION_MD = """# Orion X200 accelerator

The Orion X200 is a PCIe accelerator board for running language models on a workstation.

## Specifications

The X200 has 24 compute cores clocked at 1.8 GHz and 64 GB of LPDDR5 memory with a bandwidth of
410 GB/s. The board is 26.7 cm long and takes two slots.

## Power and cooling

Under full load the board draws 300 watts; it needs one 16-pin 12VHPWR connector. A blower fan
exhausts hot air through the bracket, so the board suits closed cases.

## Installation

### Linux

Install the driver package with `sudo apt install orion-driver-dkms`, then reboot. The kernel
module is called orionx and needs kernel 5.15 or newer.

### Windows

Run OrionSetup.exe as administrator. Windows 10 22H2 and Windows 11 are supported.

## Troubleshooting

If the status LED blinks amber three times, the board has overheated: error code E42. Clean the
fan intake and check that the case has airflow. Error code E17 means the power connector is loose.
"""

ORION_OLD_MD = """# Orion X100 accelerator (previous generation)

## Specifications

The X100 has 12 compute cores and 32 GB of GDDR6 memory. It draws 180 watts.

## Installation

On Linux install orion-legacy-driver. The X100 is no longer supported on Windows 11.
"""

VALMORA_TXT = """Valmora: a short history

Valmora was founded in 1642 by salt traders from the coast. The first settlement stood on the
east bank of the river Lenne, where a ford made the crossing easy in summer.

In 1789 a stone bridge with seven arches replaced the ford. The bridge still carries traffic today
and appears on the town's coat of arms.

The town grew quickly during the nineteenth century when a textile mill opened beside the river.
By 1900 the mill employed nearly 900 workers, most of them women from nearby villages.

Today Valmora has about 18,500 inhabitants. Its best-known event is the lantern festival, held on
the second Saturday of October, when thousands of paper lanterns float down the Lenne.

The town library, opened in 1911, holds a collection of 40,000 books, including the original
charter of the salt traders.
"""

BRENNFELD_TXT = """Brennfeld: notes on a mountain village

Brennfeld lies at 1,340 metres in the northern valleys. It was first mentioned in a monastery
record of 1310. The village has 740 inhabitants and is known for its cheese market in September.
A wooden bridge crosses the stream below the church.
"""

BREAD_PDF_PAGES = [
    ["Baking Bread at Home", "A small guide in four pages.", "",
     "This guide walks through a simple sourdough loaf: the starter, the dough,",
     "the bake and how to keep the starter alive between bakes."],
    ["Chapter 1: The starter", "",
     "Mix 50 grams of whole rye flour with 50 grams of water and leave it covered.",
     "Feed it every 24 hours. After about five days it doubles in size within six hours",
     "of a feeding; only then is it ready to raise bread."],
    ["Chapter 2: The dough", "",
     "For one loaf use 500 grams of bread flour, 375 grams of water and 10 grams of salt.",
     "That is a hydration of 75 percent, which gives an open crumb but still handles well.",
     "Fold the dough four times during the first two hours of the bulk rise."],
    ["Chapter 3: Baking", "",
     "Preheat the oven with a cast iron pot inside to 250 degrees Celsius for 45 minutes.",
     "Bake covered for 20 minutes, then uncovered at 230 degrees for another 25 minutes.",
     "Between bakes keep the starter in the fridge and feed it once a week."],
]

TEA_ZH = """中国茶叶简介

龙井茶是绿茶的代表，主要产于浙江省杭州市西湖一带。龙井茶不经过发酵，冲泡时水温以八十度左右为宜。

普洱茶产于云南省，分为生茶和熟茶两种。熟普洱经过渥堆发酵，茶汤颜色红浓，可以长期存放。

乌龙茶属于半发酵茶，著名的品种有福建的铁观音和武夷山的大红袍。乌龙茶的发酵程度大约在百分之十五到七十之间。

红茶是全发酵茶，世界上最早的红茶是福建武夷山的正山小种。
"""

COFFEE_ZH = """咖啡简介

咖啡原产于埃塞俄比亚，后来传到也门。阿拉比卡咖啡豆占全球产量的大约六成。

云南是中国最大的咖啡产区，主要种植在普洱和保山一带。
"""

TRAVEL_ZH_MD = """# 公司差旅制度

## 住宿标准

员工出差时，一线城市住宿标准为每晚不超过六百元，其他城市每晚不超过四百元。

## 交通

出差优先乘坐高铁二等座。单程超过八小时的行程可以申请乘坐飞机经济舱。

## 报销流程

出差结束后三十天内提交报销申请，并附上发票原件。逾期提交的申请需要部门经理签字批准。
"""

PLANETS_HTML = """<!doctype html><html><head><title>Planets</title><style>p{margin:0}</style></head><body>
<h1>The outer planets</h1>
<h2>Mars</h2>
<p>Mars has two small moons, Phobos and Deimos, probably captured asteroids.</p>
<p>Olympus Mons on Mars is the tallest volcano in the solar system, about 22 kilometres high.</p>
<h2>Jupiter</h2>
<p>Jupiter is the largest planet. Its Great Red Spot is a storm wider than the Earth that has lasted
for at least 350 years.</p>
<h2>Saturn</h2>
<p>Saturn's rings are made mostly of water ice. A day on Saturn lasts about 10 hours and 33 minutes.</p>
</body></html>
"""

HANDBOOK_DOCX = [
    ("Title", "Employee handbook"),
    ("Heading 1", "Time off"),
    ("Normal", "Full-time employees receive 25 days of paid vacation per calendar year. Unused days may be "
               "carried over until the end of March of the following year."),
    ("Normal", "Sick leave does not reduce vacation; from the fourth day of illness a doctor's note is needed."),
    ("Heading 1", "Starting at the company"),
    ("Normal", "New employees serve a probation period of six months, during which either side may end the "
               "contract with two weeks' notice."),
    ("Heading 2", "Equipment"),
    ("Normal", "Every new employee receives a laptop on the first day; the IT desk is on the third floor."),
]

CHECKSUM_PY = '''"""Helpers for the archive format."""

import zlib


def compute_checksum(data: bytes) -> int:
    """CRC-32 of the payload, as stored in the archive footer."""
    return zlib.crc32(data) & 0xFFFFFFFF


def pad_block(data: bytes, size: int = 512) -> bytes:
    """Pad to a whole number of 512-byte blocks with zero bytes."""
    return data + bytes(-len(data) % size)


class ArchiveWriter:
    """Writes members one after another, then the footer with the checksum."""

    def __init__(self, path):
        self.path = path
        self.members = []
'''

# (question, file name, snippet found only in the passage holding the answer)
QUESTIONS: list[tuple[str, str, str]] = [
    ("How many compute cores does the Orion X200 have?", "orion_x200.md", "24 compute cores"),
    ("How much memory is on the X200 board?", "orion_x200.md", "64 GB of LPDDR5"),
    ("What is the power consumption of the X200 under full load?", "orion_x200.md", "draws 300 watts"),
    ("Which package do I install on Linux for the X200 driver?", "orion_x200.md", "orion-driver-dkms"),
    ("Which Windows versions are supported by the Orion installer?", "orion_x200.md", "OrionSetup.exe"),
    ("What does error code E42 mean?", "orion_x200.md", "error code E42"),
    ("When was Valmora founded?", "valmora.txt", "founded in 1642"),
    ("How many arches does the stone bridge in Valmora have?", "valmora.txt", "seven arches"),
    ("What is the population of Valmora today?", "valmora.txt", "18,500 inhabitants"),
    ("When is the lantern festival held?", "valmora.txt", "second Saturday of October"),
    ("How many workers did the textile mill employ?", "valmora.txt", "900 workers"),
    ("How many books does the Valmora library hold?", "valmora.txt", "40,000 books"),
    ("What hydration does the sourdough dough have?", "bread.pdf", "hydration of 75 percent"),
    ("How hot should the oven be preheated for baking bread?", "bread.pdf", "250 degrees Celsius"),
    ("How often should the starter be fed while it is being made?", "bread.pdf", "every 24 hours"),
    ("Where should the starter be kept between bakes?", "bread.pdf", "in the fridge"),
    ("龙井茶产于哪里？", "tea.txt", "杭州市西湖"),
    ("普洱茶分为哪两种？", "tea.txt", "生茶和熟茶"),
    ("乌龙茶的发酵程度是多少？", "tea.txt", "百分之十五到七十"),
    ("世界上最早的红茶是什么？", "tea.txt", "正山小种"),
    ("一线城市出差住宿标准是多少？", "travel.md", "六百元"),
    ("出差结束后多久内要提交报销申请？", "travel.md", "三十天内"),
    ("什么情况下可以坐飞机出差？", "travel.md", "飞机经济舱"),
    ("What are the names of the moons of Mars?", "planets.html", "Phobos and Deimos"),
    ("How long has Jupiter's Great Red Spot lasted?", "planets.html", "350 years"),
    ("How long is a day on Saturn?", "planets.html", "10 hours and 33 minutes"),
    ("How many vacation days do full-time employees get?", "handbook.docx", "25 days of paid vacation"),
    ("How long is the probation period for new employees?", "handbook.docx", "six months"),
    ("Which function computes the CRC-32 checksum of the archive?", "archive.py", "def compute_checksum"),
    ("What block size does pad_block pad the data to?", "archive.py", "512-byte blocks"),
]


_EN_FILLER = ("The {a} was discussed again in a later review of the {b}.",
              "Several readers asked about the {a}, and the notes on the {b} were extended.",
              "A summary of the {a} and the {b} appears in the appendix.",
              "Earlier drafts described the {a} differently, before the {b} was revised.",
              "This section repeats background on the {a} for readers new to the {b}.")
_ZH_FILLER = ("关于{a}的说明在后来的版本中又补充了{b}的内容。", "很多读者询问{a}，因此这里再介绍一下{b}。",
              "附录中对{a}和{b}做了简单的总结。", "早期的资料对{a}的描述不同，后来{b}的部分也改写了。")


def _filler(words: list[str], paragraphs: int, seed: int, chinese: bool = False) -> list[str]:
    """Paragraphs on the document's topic that answer nothing: distractors sharing its words."""
    import random

    rng = random.Random(seed)
    templates = _ZH_FILLER if chinese else _EN_FILLER
    out = []
    for _ in range(paragraphs):
        sentences = [rng.choice(templates).format(a=rng.choice(words), b=rng.choice(words)) for _ in range(6)]
        out.append(("" if chinese else " ").join(sentences))
    return out


def _padded(text: str, words: list[str], seed: int, chinese: bool = False) -> str:
    """``text`` with two filler paragraphs after each of its paragraphs (headings kept in place)."""
    blocks = text.strip().split("\n\n")
    fill = _filler(words, 2 * len(blocks), seed, chinese)
    out = []
    for i, block in enumerate(blocks):
        out.append(block)
        if not block.lstrip().startswith("#"):
            out += fill[2 * i:2 * i + 2]
    return "\n\n".join(out) + "\n"


def write_corpus(folder: Path) -> Path:
    """Write every sample document into ``folder`` (created); returns it."""
    import docx

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hardware").mkdir(exist_ok=True)
    board = ["X200 board", "accelerator", "driver", "memory", "power supply", "cooling", "installation", "board"]
    (folder / "hardware" / "orion_x200.md").write_text(_padded(ORION_MD, board, 1), encoding="utf-8")
    (folder / "hardware" / "orion_x100.md").write_text(_padded(ORION_OLD_MD, board, 2), encoding="utf-8")
    town = ["town of Valmora", "river Lenne", "bridge", "mill", "festival", "library", "population", "history"]
    (folder / "valmora.txt").write_text(_padded(VALMORA_TXT, town, 3), encoding="utf-8")
    (folder / "brennfeld.txt").write_text(_padded(BRENNFELD_TXT, town, 4), encoding="utf-8")
    pages_pdf(folder / "bread.pdf", BREAD_PDF_PAGES)
    tea = ["龙井茶", "普洱茶", "乌龙茶", "红茶", "发酵", "茶叶产地", "冲泡方法", "绿茶"]
    (folder / "tea.txt").write_text(_padded(TEA_ZH, tea, 5, chinese=True), encoding="utf-8")
    (folder / "coffee.txt").write_text(_padded(COFFEE_ZH, ["咖啡", "产区", "云南", "发酵"], 6, chinese=True),
                                       encoding="utf-8")
    travel = ["出差", "住宿标准", "报销", "交通", "发票", "审批", "城市"]
    (folder / "travel.md").write_text(_padded(TRAVEL_ZH_MD, travel, 7, chinese=True), encoding="utf-8")
    (folder / "planets.html").write_text(PLANETS_HTML, encoding="utf-8")
    d = docx.Document()
    for style, text in HANDBOOK_DOCX:
        d.add_paragraph(text, style=style)
    d.save(str(folder / "handbook.docx"))
    (folder / "src").mkdir(exist_ok=True)
    (folder / "src" / "archive.py").write_text(CHECKSUM_PY, encoding="utf-8")
    return folder
