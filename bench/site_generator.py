"""Sites the answer path was never tuned on: facts with sibling items on purpose (bolt sizes, parts, car
parks, halls, levels, shifts, extensions, ovens, docks), and questions about them, half about a listed
item and half about an unlisted sibling or a thing the facts do not give.

    generate_sites(count=5, seed=1) -> [Site, ...]   # each of 12+ sections, about 60 questions

Every site is drawn from a seed: the same seed gives the same sites, another seed others. The values
(torques, extensions, times, names) are drawn too, so no figure is the same from site to site.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# fmt: off
_NAMES = ("Oak", "Elm", "Birch", "Maple", "Cedar", "Willow", "Ash", "Pine", "Rowan", "Hazel", "Alder", "Larch")
_SITES = ("the Riverside plant", "the Northgate depot", "the Eastfield works", "the Harbour distribution centre",
          "the Hillcrest factory", "the Lakeside warehouse", "the Westbrook mill", "the Southport yard")
_COLOURS = ("yellow", "orange", "blue", "green", "red", "white")
# fmt: on


@dataclass(frozen=True)
class Question:
    text: str
    expect: tuple[str, ...] = ()  # one of these must be in a right answer; () = it must be declined
    kind: str = "listed"  # listed (answerable), sibling (an unlisted item of a listed kind), absent


@dataclass
class Site:
    name: str
    sections: list[tuple[str, str]] = field(default_factory=list)  # (title, text)
    questions: list[Question] = field(default_factory=list)

    @property
    def facts(self) -> str:
        return "\n\n".join(f"# {title}\n{text}" for title, text in self.sections) + "\n"


Section = Callable[[random.Random, Site], None]


def _pick(rng: random.Random, pool: Sequence[int], count: int) -> list[int]:
    return sorted(rng.sample(list(pool), count))


def _time(hour: int, minute: int = 0) -> str:
    return f"{hour}:{minute:02d}"


def _torque(rng: random.Random, site: Site) -> None:
    sizes = _pick(rng, (6, 8, 10, 12, 16, 20), 3)
    line = rng.randint(1, 6)
    torques = {s: rng.randint(2, 9) * 5 + s for s in sizes}
    site.sections.append(
        (
            "Torque specifications",
            " ".join(
                f"The M{s} bolts on line {line} are tightened to {torques[s]} newton metres." for s in sizes
            ),
        )
    )
    for s in sizes[:2]:
        site.questions.append(
            Question(f"What torque do the M{s} bolts on line {line} need?", (str(torques[s]),))
        )
    other = next(s for s in (4, 5, 14, 18, 24) if s not in sizes)
    site.questions.append(Question(f"What torque do the M{other} bolts take?", kind="sibling"))
    site.questions.append(
        Question(f"What torque do the M{sizes[0]} bolts on line {line + 1} need?", kind="sibling")
    )


def _car_parks(rng: random.Random, site: Site) -> None:
    parks = _pick(rng, range(1, 6), 3)
    spaces = {p: rng.randint(2, 16) * 5 for p in parks}
    text = " ".join(f"Car park P{p} has {spaces[p]} spaces." for p in parks)
    site.sections.append(("Parking", text + f" Visitors park in car park P{parks[0]}."))
    site.questions.append(
        Question(f"How many spaces are there in car park P{parks[1]}?", (str(spaces[parks[1]]),))
    )
    site.questions.append(Question("Where do visitors park?", (f"p{parks[0]}",)))
    other = next(p for p in range(1, 9) if p not in parks)
    site.questions.append(Question(f"How many spaces does car park P{other} have?", kind="sibling"))
    site.questions.append(Question("How much does parking cost per day?", kind="absent"))


def _extensions(rng: random.Random, site: Site) -> None:
    people = rng.sample(
        ["security desk", "first aid", "shift supervisor", "reception", "IT help desk", "maintenance"], 4
    )
    numbers = rng.sample(range(2000, 4000), 4)
    site.sections.append(
        (
            "Phone extensions",
            " ".join(f"The {p} is on extension {n}." for p, n in zip(people, numbers, strict=True)),
        )
    )
    for p, n in list(zip(people, numbers, strict=True))[:3]:
        site.questions.append(Question(f"What is the extension of the {p}?", (str(n),)))
    other = next(
        p for p in ["quality lab", "canteen manager", "works council", "fire warden"] if p not in people
    )
    site.questions.append(Question(f"What is the extension of the {other}?", kind="sibling"))


def _halls(rng: random.Random, site: Site) -> None:
    uses = rng.sample(
        ["raw materials", "finished goods", "the paint shop", "returns", "spare parts", "packaging"], 3
    )
    halls = _pick(rng, range(1, 7), 3)
    site.sections.append(
        ("Halls", " ".join(f"Hall {h} holds {u}." for h, u in zip(halls, uses, strict=True)))
    )
    site.questions.append(Question(f"What is in hall {halls[1]}?", (uses[1].removeprefix("the "),)))
    site.questions.append(Question(f"Which hall holds {uses[2]}?", (f"hall {halls[2]}",)))
    other = next(h for h in range(1, 10) if h not in halls)
    site.questions.append(Question(f"What is in hall {other}?", kind="sibling"))


def _levels(rng: random.Random, site: Site) -> None:
    rooms = rng.sample(
        ["the offices", "the training room", "the canteen", "the server room", "the archive"], 3
    )
    levels = _pick(rng, range(0, 6), 3)
    site.sections.append(
        ("Office building", " ".join(f"Level {lv} holds {r}." for lv, r in zip(levels, rooms, strict=True)))
    )
    site.questions.append(Question(f"What is on level {levels[0]}?", (rooms[0].removeprefix("the "),)))
    other = next(lv for lv in range(0, 9) if lv not in levels)
    site.questions.append(Question(f"What is on level {other}?", kind="sibling"))


def _shifts(rng: random.Random, site: Site) -> None:
    start = rng.choice((5, 6))
    length = 8
    night = rng.random() < 0.5
    text = f"The early shift runs from {_time(start)} to {_time(start + length)}. The late shift runs from {_time(start + length)} to {_time(start + 2 * length)}."
    text += (
        " There is no night shift."
        if not night
        else f" The night shift runs from {_time(start + 2 * length)} to {_time(start)}."
    )
    site.sections.append(("Shifts", text))
    site.questions.append(Question("When does the early shift start?", (_time(start),)))
    site.questions.append(Question("When does the late shift end?", (_time(start + 2 * length),)))
    if night:
        site.questions.append(Question("When does the night shift start?", (_time(start + 2 * length),)))
    else:
        site.questions.append(Question("When does the night shift start?", ("no night shift",)))
    site.questions.append(Question("When does the weekend shift start?", kind="sibling"))


def _parts(rng: random.Random, site: Site) -> None:
    base = rng.randint(40, 90) * 100 + 11
    moulds = rng.sample(range(3, 40), 3)
    parts = [base, base + 1, base + 3]
    site.sections.append(
        ("Moulds", " ".join(f"Part {p} is made with mould {m}." for p, m in zip(parts, moulds, strict=True)))
    )
    site.questions.append(Question(f"Which mould makes part {parts[0]}?", (str(moulds[0]),)))
    site.questions.append(Question(f"Which mould is used for part {parts[2]}?", (str(moulds[2]),)))
    site.questions.append(Question(f"Which mould makes part {base + 2}?", kind="sibling"))


def _canteen(rng: random.Random, site: Site) -> None:
    opens, closes = rng.choice((6, 7, 8)), rng.choice((14, 15))
    price = f"{rng.randint(3, 6)}.{rng.choice((0, 5))}0"
    site.sections.append(
        (
            "Canteen",
            f"The canteen opens at {_time(opens, 30)} and closes at {_time(closes)} on weekdays. A hot meal costs {price} euros.",
        )
    )
    site.questions.append(Question("When does the canteen open?", (_time(opens, 30),)))
    site.questions.append(Question("How much is a hot meal?", (price,)))
    site.questions.append(Question("When does the canteen open on Sundays?", kind="sibling"))
    site.questions.append(Question("How much does a coffee cost in the canteen?", kind="absent"))


def _meeting_rooms(rng: random.Random, site: Site) -> None:
    names = rng.sample(_NAMES, 3)
    seats = [rng.randint(2, 12) * 2 for _ in names]
    numbers = rng.sample(range(101, 420), 3)
    site.sections.append(
        (
            "Meeting rooms",
            " ".join(
                f"Meeting room {n} is room {r} and seats {s} people."
                for n, r, s in zip(names, numbers, seats, strict=True)
            ),
        )
    )
    site.questions.append(Question(f"How many people does meeting room {names[0]} seat?", (str(seats[0]),)))
    site.questions.append(Question(f"Which room is meeting room {names[1]}?", (str(numbers[1]),)))
    other = next(n for n in _NAMES if n not in names)
    site.questions.append(Question(f"How many people does meeting room {other} seat?", kind="sibling"))


def _racks(rng: random.Random, site: Site) -> None:
    load = rng.randint(6, 20) * 100
    high = rng.choice((2, 3, 4))
    site.sections.append(
        (
            "Racks",
            f"The load limit of a rack shelf is {load} kilograms. Pallets may be stacked at most {high} high.",
        )
    )
    site.questions.append(Question("What is the load limit of a rack shelf?", (str(load),)))
    site.questions.append(Question("How high may pallets be stacked?", (f"{high} high",)))
    site.questions.append(Question("What is the maximum height of a rack?", kind="absent"))


def _gates(rng: random.Random, site: Site) -> None:
    gates = _pick(rng, range(1, 8), 3)
    uses = rng.sample(["trucks", "visitors", "staff", "deliveries", "the fire brigade"], 3)
    site.sections.append(
        ("Gates", " ".join(f"Gate {g} is for {u}." for g, u in zip(gates, uses, strict=True)))
    )
    site.questions.append(Question(f"Which gate is for {uses[0]}?", (f"gate {gates[0]}",)))
    site.questions.append(Question(f"What is gate {gates[1]} for?", (uses[1].removeprefix("the "),)))
    other = next(g for g in range(1, 10) if g not in gates)
    site.questions.append(Question(f"What is gate {other} for?", kind="sibling"))


def _vests(rng: random.Random, site: Site) -> None:
    colours = rng.sample(_COLOURS, 3)
    site.sections.append(
        (
            "Safety vests",
            f"Visitors wear {colours[0]} vests. Forklift drivers wear {colours[1]} vests. Fire wardens wear {colours[2]} vests.",
        )
    )
    site.questions.append(Question("What colour vest do visitors wear?", (colours[0],)))
    site.questions.append(Question("What do fire wardens wear?", (colours[2],)))
    site.questions.append(Question(f"How much does a {colours[0]} vest cost?", kind="absent"))


def _speeds(rng: random.Random, site: Site) -> None:
    forklift, truck = rng.choice((6, 8, 10, 12)), rng.choice((15, 20, 25, 30))
    site.sections.append(
        (
            "Speed limits",
            f"Forklifts drive at most {forklift} kilometres per hour in the halls. Trucks drive at most {truck} kilometres per hour on the yard.",
        )
    )
    site.questions.append(Question("What is the speed limit for forklifts?", (str(forklift),)))
    site.questions.append(Question("How fast may trucks drive on the yard?", (str(truck),)))
    site.questions.append(Question("What is the speed limit for bicycles?", kind="sibling"))


def _ovens(rng: random.Random, site: Site) -> None:
    paint, cure = rng.randint(16, 22) * 10, rng.randint(9, 14) * 10
    site.sections.append(
        ("Ovens", f"The paint oven runs at {paint} degrees. The curing oven runs at {cure} degrees.")
    )
    site.questions.append(Question("What temperature does the paint oven run at?", (str(paint),)))
    site.questions.append(Question("How hot is the curing oven?", (str(cure),)))
    site.questions.append(Question("What temperature does the drying oven run at?", kind="sibling"))


def _docks(rng: random.Random, site: Site) -> None:
    docks = _pick(rng, range(1, 7), 2)
    opens, closes = rng.choice((5, 6, 7)), rng.choice((15, 16, 17))
    site.sections.append(
        (
            "Deliveries",
            f"Deliveries are accepted at dock {docks[0]} from {_time(opens)} to {_time(closes)}. Dock {docks[1]} takes returns.",
        )
    )
    site.questions.append(Question("When are deliveries accepted?", (_time(opens), _time(closes))))
    site.questions.append(Question("Which dock takes returns?", (f"dock {docks[1]}",)))
    other = next(d for d in range(1, 9) if d not in docks)
    site.questions.append(Question(f"What is dock {other} for?", kind="sibling"))
    site.questions.append(Question("When is the next delivery due?", kind="absent"))


def _lockers(rng: random.Random, site: Site) -> None:
    fee = rng.randint(2, 6) * 5
    site.sections.append(
        (
            "Lockers",
            f"Lockers are in the basement of the office building. A lost locker key costs {fee} euros to replace.",
        )
    )
    site.questions.append(Question("Where are the lockers?", ("basement",)))
    site.questions.append(Question("How much does a lost locker key cost?", (str(fee),)))
    site.questions.append(Question("How many lockers are there?", kind="absent"))


SECTIONS: tuple[Section, ...] = (
    _torque, _car_parks, _extensions, _halls, _levels, _shifts, _parts, _canteen, _meeting_rooms,
    _racks, _gates, _vests, _speeds, _ovens, _docks, _lockers,
)  # fmt: skip
ABSENT = (
    "What is the wifi password?",
    "When is the next fire drill?",
    "How many people work at this site?",
    "How long is the lunch break?",
    "Who is the plant manager?",
)


def generate_sites(count: int = 7, *, seed: int = 1, sections: int = 13) -> list[Site]:
    """``count`` sites of ``sections`` sections each (at least 12), with their questions."""
    rng = random.Random(seed)
    sites = []
    for index in range(count):
        site = Site(_SITES[(seed + index) % len(_SITES)])
        for make in rng.sample(SECTIONS, min(max(sections, 12), len(SECTIONS))):
            make(rng, site)
        site.questions += [Question(text, kind="absent") for text in rng.sample(ABSENT, 3)]
        sites.append(site)
    return sites
