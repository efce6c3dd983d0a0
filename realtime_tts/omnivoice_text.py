"""OmniVoice text rules: language table, instruct validation, text cleaning, non-verbal tags, target length.

Pure Python (the web process imports it to validate requests early): must not import torch or numpy.
"""

from __future__ import annotations

import bisect
import difflib
import re
import unicodedata
from functools import lru_cache

from realtime_tts.errors import BadRequest

FRAME_RATE_HZ = 25  # codec frames per second (24 kHz audio, hop 960)

# ---------------------------------------------------------------------------------------------------------------
# Languages: the 646 ids the released model was trained with, each with its lowercase English name.
# ---------------------------------------------------------------------------------------------------------------


def _parse_languages(table: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in table.replace("\n", "").split(";"):
        if entry:
            code, _, name = entry.partition(" ")
            out[name] = code
    return out


def resolve_language(language: str | None) -> str | None:
    """A language id or English name → the model's language id; None / "none" / unknown → None.

    Unknown names fall back to language-agnostic mode (as the released model does), not an error:
    callers wanting strictness check `is_known_language` first.
    """
    if language is None or language.lower() == "none":
        return None
    if language in LANGUAGE_IDS:
        return language
    return LANGUAGE_NAME_TO_ID.get(language.lower())


def is_known_language(language: str | None) -> bool:
    return language is None or language.lower() == "none" or resolve_language(language) is not None


# ---------------------------------------------------------------------------------------------------------------
# Voice-design instruct: comma-separated items from fixed categories, all-English or all-Chinese.
# ---------------------------------------------------------------------------------------------------------------

_HAN_RE = re.compile(r"[\u4e00-\u9fff]")
# English ↔ Chinese pairs per mutually exclusive category.
_PAIRED_CATEGORIES: tuple[dict[str, str], ...] = (
    {"male": "男", "female": "女"},
    {"child": "儿童", "teenager": "少年", "young adult": "青年", "middle-aged": "中年", "elderly": "老年"},
    {"very low pitch": "极低音调", "low pitch": "低音调", "moderate pitch": "中音调", "high pitch": "高音调",
     "very high pitch": "极高音调"},
    {"whisper": "耳语"},
)
ACCENTS = frozenset(f"{a} accent" for a in (
    "american", "british", "australian", "chinese", "canadian", "indian", "korean", "portuguese", "russian",
    "japanese"))
DIALECTS = frozenset(f"{d}话" for d in (
    "河南", "陕西", "四川", "贵州", "云南", "桂林", "济南", "石家庄", "甘肃", "宁夏", "青岛", "东北"))
_EN_TO_ZH = {en: zh for cat in _PAIRED_CATEGORIES for en, zh in cat.items()}
_ZH_TO_EN = {zh: en for en, zh in _EN_TO_ZH.items()}
_EXCLUSIVE_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(cat) | frozenset(cat.values()) for cat in _PAIRED_CATEGORIES) + (ACCENTS, DIALECTS)
INSTRUCT_ITEMS = frozenset(_EN_TO_ZH) | frozenset(_ZH_TO_EN) | ACCENTS | DIALECTS
INSTRUCT_ITEMS_EN = tuple(sorted(i for i in INSTRUCT_ITEMS if not _HAN_RE.search(i)))
INSTRUCT_ITEMS_ZH = tuple(sorted(i for i in INSTRUCT_ITEMS if _HAN_RE.search(i)))
_ALLOWED_MSG = ("allowed items (one per category: gender, age, pitch, style, accent or dialect), "
                "English: " + ", ".join(INSTRUCT_ITEMS_EN) + "; Chinese: " + "，".join(INSTRUCT_ITEMS_ZH))


def normalize_instruct(instruct: str | None, text: str = "") -> str | None:
    """Validate a voice-design instruct and return the exact string the model is conditioned on.

    Items are matched case-insensitively and re-joined in one language: Chinese when a dialect is named
    or (without an accent) when the text to speak contains Han characters, else English.
    Raises BadRequest(field="instruct") naming the bad items and listing the allowed ones.
    """
    if instruct is None:
        return None
    stripped = instruct.strip()
    if not stripped:
        return None
    items = [item.strip().lower() for item in re.split(r"\s*[,，]\s*", stripped) if item]
    unknown = [i for i in items if i not in INSTRUCT_ITEMS]
    if unknown:
        described = []
        for item in unknown:
            close = difflib.get_close_matches(item, INSTRUCT_ITEMS, n=1, cutoff=0.6)
            described.append(f"'{item}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise BadRequest(f"instruct: unsupported item(s) {', '.join(described)}; {_ALLOWED_MSG}",
                         field="instruct")
    has_dialect = any(i in DIALECTS for i in items)
    has_accent = any(i in ACCENTS for i in items)
    if has_dialect and has_accent:
        raise BadRequest("instruct: a Chinese dialect and an English accent cannot be combined", field="instruct")
    use_zh = has_dialect or (not has_accent and bool(text) and bool(_HAN_RE.search(text)))
    table = _EN_TO_ZH if use_zh else _ZH_TO_EN
    items = [table.get(i, i) for i in items]
    clashes = [[i for i in items if i in group] for group in _EXCLUSIVE_GROUPS]
    clashes = [c for c in clashes if len(c) > 1]
    if clashes:
        raise BadRequest("instruct: conflicting items in one category: "
                         + "; ".join(" vs ".join(f"'{i}'" for i in c) for c in clashes)
                         + f"; {_ALLOWED_MSG}", field="instruct")
    return ("，" if any(_HAN_RE.search(i) for i in items) else ", ").join(items)


# ---------------------------------------------------------------------------------------------------------------
# Text cleaning and non-verbal tags.
# ---------------------------------------------------------------------------------------------------------------

NONVERBAL_TAGS = ("laughter", "sigh", "confirmation-en", "question-en", "question-ah", "question-oh",
                  "question-ei", "question-yi", "surprise-ah", "surprise-oh", "surprise-wa", "surprise-yo",
                  "dissatisfaction-hnn")
_NONVERBAL_RE = re.compile(r"\[(?:" + "|".join(re.escape(t) for t in NONVERBAL_TAGS) + r")\]")
_SPACE_NEAR_HAN_RE = re.compile(r"(?<=[\u4e00-\u9fff])\s+|\s+(?=[\u4e00-\u9fff])")
_END_PUNCTUATION = frozenset(";:,.!?…)]}\"'“”‘’；：，。！？、）】") | {"……"}


def clean_text(text: str, ref_text: str | None = None) -> str:
    """The text the model reads: reference transcript + " " + text, newlines dropped, full-width round
    brackets made ASCII, runs of spaces/tabs collapsed, spaces next to Han characters removed."""
    full = (ref_text.strip() + " " + text.strip()) if ref_text else text.strip()
    full = re.sub(r"[\r\n]+", "", full)
    full = full.replace("\uff08", "(").replace("\uff09", ")")
    full = re.sub(r"[ \t]+", " ", full)
    return _SPACE_NEAR_HAN_RE.sub("", full)


def split_nonverbal(text: str) -> list[str]:
    """Cut text into pieces so that every non-verbal tag ([laughter], ...) is a piece of its own: the model
    saw each tag tokenized alone, whatever the language around it. Empty pieces are dropped."""
    pieces: list[str] = []
    last = 0
    for m in _NONVERBAL_RE.finditer(text):
        if m.start() > last:
            pieces.append(text[last:m.start()])
        pieces.append(m.group())
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
    return pieces


def end_with_punctuation(text: str) -> str:
    """A reference transcript gets a final full stop (。 for Chinese) unless it already ends in punctuation."""
    text = text.strip()
    if text and text[-1] not in _END_PUNCTUATION:
        text += "。" if any("\u4e00" <= c <= "\u9fff" for c in text) else "."
    return text


# ---------------------------------------------------------------------------------------------------------------
# Target length: rule-based per-character speaking weights scaled by a reference (or a default pace).
# ---------------------------------------------------------------------------------------------------------------

_SCRIPT_WEIGHT = {
    "cjk": 3.0, "hangul": 2.5, "kana": 2.2, "ethiopic": 3.0, "yi": 3.0, "indic": 1.8, "thai_lao": 1.5,
    "khmer_myanmar": 1.8, "arabic": 1.5, "hebrew": 1.5, "latin": 1.0, "cyrillic": 1.0, "greek": 1.0,
    "armenian": 1.0, "georgian": 1.0, "default": 1.0,
}
_PUNCT_WEIGHT, _SPACE_WEIGHT, _DIGIT_WEIGHT, _MARK_WEIGHT = 0.5, 0.2, 3.5, 0.0
# Unicode blocks as (last code point, script), ascending; looked up by bisection.
_BLOCKS: tuple[tuple[int, str], ...] = (
    (0x02AF, "latin"), (0x03FF, "greek"), (0x052F, "cyrillic"), (0x058F, "armenian"), (0x05FF, "hebrew"),
    (0x08FF, "arabic"), (0x0DFF, "indic"), (0x0EFF, "thai_lao"), (0x0FFF, "indic"),
    (0x109F, "khmer_myanmar"), (0x10FF, "georgian"), (0x11FF, "hangul"), (0x139F, "ethiopic"),
    (0x177F, "default"), (0x17FF, "khmer_myanmar"), (0x18FF, "default"), (0x19DF, "indic"),
    (0x19FF, "khmer_myanmar"), (0x1C7F, "indic"), (0x1C8F, "cyrillic"), (0x1CBF, "georgian"),
    (0x1CFF, "indic"), (0x1DBF, "latin"), (0x1DFF, "default"), (0x1EFF, "latin"), (0x30FF, "kana"),
    (0x312F, "cjk"), (0x318F, "hangul"), (0x9FFF, "cjk"), (0xA4CF, "yi"), (0xA4FF, "default"),
    (0xA63F, "default"), (0xA69F, "cyrillic"), (0xA6FF, "default"), (0xA7FF, "latin"), (0xA82F, "indic"),
    (0xA87F, "default"), (0xA95F, "indic"), (0xA97F, "hangul"), (0xA9DF, "indic"),
    (0xA9FF, "khmer_myanmar"), (0xAA5F, "indic"), (0xAA7F, "khmer_myanmar"), (0xAAFF, "indic"),
    (0xAB2F, "ethiopic"), (0xAB6F, "latin"), (0xABBF, "default"), (0xABFF, "indic"), (0xD7AF, "hangul"),
    (0xFAFF, "cjk"), (0xFDFF, "arabic"), (0xFE6F, "default"), (0xFEFF, "arabic"), (0xFFEF, "latin"),
)
_BLOCK_ENDS = [end for end, _ in _BLOCKS]


@lru_cache(maxsize=8192)
def char_weight(char: str) -> float:
    """Relative speaking time of one character (a Latin letter = 1)."""
    code = ord(char)
    if 65 <= code <= 90 or 97 <= code <= 122:
        return 1.0
    if code == 32:
        return _SPACE_WEIGHT
    if code == 0x0640:  # Arabic tatweel only stretches a glyph
        return _MARK_WEIGHT
    category = unicodedata.category(char)
    if category[0] == "M":
        return _MARK_WEIGHT
    if category[0] in "PS":
        return _PUNCT_WEIGHT
    if category[0] == "Z":
        return _SPACE_WEIGHT
    if category[0] == "N":
        return _DIGIT_WEIGHT
    i = bisect.bisect_left(_BLOCK_ENDS, code)
    if i < len(_BLOCKS):
        return _SCRIPT_WEIGHT[_BLOCKS[i][1]]
    return _SCRIPT_WEIGHT["cjk"] if code > 0x20000 else _SCRIPT_WEIGHT["default"]


def text_weight(text: str) -> float:
    return sum(char_weight(c) for c in text)


# Without a reference the pace is that of "Nice to meet you." spoken in 25 frames (1 s).
_DEFAULT_PACE = ("Nice to meet you.", 25)
_SHORT_FRAMES = 50.0  # estimates under this are lifted along a cube-root curve (short texts run long)


def estimate_frames(text: str, ref_text: str | None = None, ref_frames: int | None = None,
                    speed: float = 1.0) -> int:
    """Codec frames (25 Hz) for `text`, at the pace of the reference (transcript, frames) if given."""
    if ref_frames is None or not ref_text:
        ref_text, ref_frames = _DEFAULT_PACE
    est = 0.0
    ref_weight = text_weight(ref_text)
    if ref_frames > 0 and ref_weight != 0:
        frames_per_weight_inv = ref_weight / ref_frames
        est = text_weight(text) / frames_per_weight_inv
        if est < _SHORT_FRAMES:
            est = _SHORT_FRAMES * (est / _SHORT_FRAMES) ** (1.0 / 3)
    if speed > 0 and speed != 1.0:
        est = est / speed
    return max(1, int(est))


def target_frames(text: str, ref_text: str | None = None, ref_frames: int | None = None,
                  speed: float | None = None, duration_s: float | None = None) -> int:
    """The number of frames to generate: duration_s fixes it (× 25 Hz); otherwise the estimate / speed."""
    if duration_s is not None:
        return max(1, int(duration_s * FRAME_RATE_HZ))
    return estimate_frames(text, ref_text, ref_frames, 1.0 if speed is None else speed)


def validate_speed_duration(speed: float | None, duration_s: float | None) -> None:
    """Range checks the model's length rule needs (BadRequest names the field)."""
    if speed is not None and not (0.25 <= speed <= 4.0):
        raise BadRequest(f"speed must be within 0.25..4.0, got {speed}", field="speed")
    if duration_s is not None and not (0.04 <= duration_s <= 600.0):
        raise BadRequest(f"duration must be within 0.04..600 s, got {duration_s}", field="duration")


# Language table (id, lowercase English name), from the released model's language map.
_LANGUAGE_TABLE = """
aae arbëreshë albanian;aal afade;aao algerian saharan arabic;ab abkhazian;abb bankon;abn abua;abr abron;
abs ambonese malay;abv baharna arabic;acm mesopotamian arabic;acw hijazi arabic;acx omani arabic;
adf dhofari arabic;adx amdo tibetan;ady adyghe;aeb tunisian arabic;aec saidi arabic;af afrikaans;
afb gulf arabic;afo eloyi;ahl igo;ahs ashe;ajg aja (benin);aju judeo-moroccan arabic;ala alago;
aln gheg albanian;alo larike-wakasihu;am amharic;amu guerrero amuzgo;an aragonese;anc ngas;ank goemai;
anp angika;anw anaang;aom ömie;apc levantine arabic;apd sudanese arabic;arb standard arabic;
arq algerian arabic;ars najdi arabic;ary moroccan arabic;arz egyptian arabic;as assamese;ast asturian;
avl eastern egyptian bedawi arabic;awo awak;ayl libyan arabic;ayp north mesopotamian arabic;
az azerbaijani;ba bashkir;bag tuki;bas basa (cameroon);bax bamun;bba baatonum;bbj ghomálá';bbl bats;
bbu kulung (nigeria);bce bamenyam;bci baoulé;bcs kohumono;bcy bacama;bda bayot;bde bade;bdm buduma;
be belarusian;beb bebele;bew betawi;bfd bafut;bft balti;bg bulgarian;bgp eastern balochi;bhb bhili;
bhh bukharic;bho bhojpuri;bhp bima;bhr bara malagasy;bjj kanauji;bjk barok;bjn banjar;bjt balanta-ganja;
bkh bakoko;bkm kom (cameroon);bky bokyi;bmm northern betsimisaraka malagasy;bmq bomu;bn bengali;
bnm batanga;bnn bunun;bns bundeli;bo tibetan;bou bondei;bqg bago-kusuntu;br breton;bra braj;brh brahui;
bri mokpwe;brx bodo;bs bosnian;bsh kati;bsj bangwinji;bsk burushaski;btm batak mandailing;btv bateri;
bug buginese;bum bulu (cameroon);buo terei;bux boghom;bwr bura-pabir;bxf bilur;byc ubaghara;bys burak;
byv medumba;byx qaqet;bzc southern betsimisaraka malagasy;bzw basa (nigeria);ca catalan;ccg samba daka;
ceb cebuano;cen cen;cfa dijim-bwilim;cgg chiga;chq quiotepec chinantec;cjk chokwe;ckb central kurdish;
ckl cibak;ckr kairak;cky cakfem-mushere;cnh hakha chin;cpy south ucayali ashéninka;cs czech;
cte tepinapa chinantec;ctl tlacoatzintepec chinantec;cut teutila cuicatec;cux tepeuxila cuicatec;
cv chuvash;cy welsh;da danish;dag dagbani;dar dargwa;dav taita;dbd dadiya;dcc deccan;de german;
deg degema;dgh dghwede;dgo dogri;dje zarma;dmk domaaki;dml dameli;dru rukai;dty dotyali;dua duala;
dv dhivehi;dyu dyula;dzg dazaga;ebr ebrié;ebu embu;ego eggon;eiv askopan;eko koti;ekr yace;el greek;
elm eleme;en english;eo esperanto;es spanish;esu central yupik;et estonian;eto eton (cameroon);
ets yekhee;etu ejagham;eu basque;ewo ewondo;ext extremaduran;eyo keiyo;fa persian;
fan fang (equatorial guinea);fat fanti;ff fulah;ffm maasina fulfulde;fi finnish;fia nobiin;fil filipino;
fip fipa;fkk kirya-konzəl;fmp fe'fe';fr french;fub adamawa fulfulde;fuc pulaar;fue borgu fulfulde;
fuf pular;fuh western niger fulfulde;fui bagirmi fulfulde;fuq central-eastern niger fulfulde;
fuv nigerian fulfulde;fy western frisian;ga irish;gbm garhwali;gbr gbagyi;gby gbari;gcc mali;
gdf guduf-gava;gej gen;ges geser-gorom;ggg gurgula;gid gidar;gig goaria;giz south giziga;gjk kachi koli;
gju gujari;gl galician;glw glavda;gn guarani;gol gola;gom goan konkani;gsl gusilay;gu gujarati;
gui eastern bolivian guaraní;gur farefare;guz gusii;gv manx;gwc gawri;gwe gweno;gwt gawar-bati;
gya northwest gbaya;gyz geji;ha hausa;hah hahon;hao hakö;haw hawaiian;haz hazaragi;hbb huba;he hebrew;
hem hemba;hi hindi;hia lamang;hkk hunjara-kaina ke;hla halia;hno northern hindko;hoj hadothi;
hr croatian;hsb upper sorbian;ht haitian;hu hungarian;hue san francisco del mar huave;hul hula;
hux nüpode huitoto;hwo hwana;hy armenian;hz herero;
ia interlingua (international auxiliary language association);ibb ibibio;id indonesian;
ida idakho-isukha-tiriki;idu idoma;ig igbo;ijc izon;ijn kalabari;ik inupiaq;ikw ikwere;is icelandic;
ish esan;iso isoko;it italian;its isekiri;itw ito;itz itzá;ja japanese;jal yalahatan;jax jambi malay;
jgo ngomba;jmx western juxtlahuaca mixtec;jns jaunsari;jqr jaqaru;juk wapan;juo jiba;jv javanese;
ka georgian;kab kabyle;kai karekare;kaj jju;kam kamba;kbd kabardian;kbl kanembu;kbt abadi;kcq kamo;
kdh tem;kea kabuverdianu;keu akebu;kfe kota (india);kfk kinnauri;kfp korwa;khg khams tibetan;khw khowar;
kj kuanyama;kjc coastal konjo;kjk highland konjo;kk kazakh;kln kalenjin;kls kalasha;km khmer;
kmr northern kurdish;kmy koma;kn kannada;kna dera (nigeria);knn konkani;ko korean;
kol kol (papua new guinea);koo konzo;kpo ikposo;kqo eastern krahn;ks kashmiri;ksd kuanua;ksf bafia;
kto kuot;kuh kushi;kvx parkari koli;kw cornish;kwm kwambi;kxp wadiyara koli;ky kirghiz;kyx rapoisi;
lag rangi;lb luxembourgish;lcm tungag;ldb dũya;lg ganda;lij ligurian;lir liberian english;lkb kabras;
lla lala-roba;ln lingala;lnu longuda;lo lao;loa loloda;lrk loarki;lss lasi;lt lithuanian;ltg latgalian;
lto tsotso;lua luba-lulua;luo luo;lus lushai;lv latvian;lwg wanga;mab yutanduchi mixtec;maf mafa;
mai maithili;mau huautla mazatec;max north moluccan malay;mbo mbo (cameroon);mcf matsés;mcn masana;
mcx mpiemo;mdd mbum;mde maba (chad);mdf moksha;mek mekeo;mer meru;meu motu;mfm marghi south;
mfn cross river mbembe;mfo mbe;mfv mandjak;mgg mpumpong;mgi lijili;mhk mungaka;mhr eastern mari;
mi maori;mig san miguel el grande mixtec;miu cacaloxtepec mixtec;mk macedonian;mkf miya;mki dhatki;
ml malayalam;mlq western maninkakan;mn mongolian;mne naba;mni manipuri;mqy manggarai;mr marathi;
mrj western mari;mrr maria (india);mrt marghi central;ms malay;mse musey;msh masikoro malagasy;
msw mansoanka;mt maltese;mtr mewari;mtu tututepec mixtec;mtx tidaá mixtec;mua mundang;mug musgu;
mui musi;mve marwari (pakistan);mvy indus kohistani;mxs huitepec mixtec;mxu mada (cameroon);
mxy southeastern nochixtlán mixtec;my burmese;myv erzya;mzl mazatlán mixe;nal nalik;nan min nan chinese;
nap neapolitan;nb norwegian bokmål;nbh ngamo;ncf notsi;nco sibe;ncx central puebla nahuatl;
ndi samba leko;ng ndonga;ngi ngizim;nhg tetelcingo nahuatl;nhi zacatlán-ahuacatlán-tepetzintla nahuatl;
nhn central nahuatl;nhq huaxcaleca nahuatl;nja nzanyi;nl dutch;nla ngombale;nlv orizaba nahuatl;
nmg kwasio;nmz nawdm;nn norwegian nynorsk;nnh ngiemboon;no norwegian;noe nimadi;npi nepali;nso pedi;
ny chichewa;nyu nyungwe;oc occitan;odk od;odu odual;ogo khana;om oromo;orc orma;oru ormuri;ory odia;
os iron ossetic;pa panjabi;pbs central pame;pbt southern pashto;pbu northern pashto;pcm nigerian pidgin;
pex petats;phl phalura;phr pahari-potwari;pip pero;piy piya-kwonci;pko pökoot;pl polish;
plk kohistani shina;plt plateau malagasy;pmq northern pame;pms piemontese;pmy papuan malay;
pnb western panjabi;poc poqomam;poe san juan atzingo popoloca;pow san felipe otlaltepec popoloca;
prq ashéninka perené;ps pushto;pst central pashto;pt portuguese;pua western highland purepecha;
pwn paiwan;qug chimborazo highland quichua;qum sipacapense;qup southern pastaza quechua;
qur yanahuanca pasco quechua;qus santiago del estero quichua;quv sacapulteco;qux yauyos quechua;
quy ayacucho quechua;qva ambo-pasco quechua;qvi imbabura highland quichua;qvj loja highland quichua;
qvl cajatambo north lima quechua;qwa corongo ancash quechua;qws sihuas ancash quechua;
qxa chiquián ancash quechua;qxp puno quechua;qxt santa ana de tusi pasco quechua;
qxu arequipa-la unión quechua;qxw jauja wanca quechua;rag logooli;rm romansh;ro romanian;rob tae';
rof rombo;roo rotokas;rth ratahan;ru russian;rup macedo-romanian;rw kinyarwanda;sa sanskrit;sah yakut;
sat santali;sau saleman;say saya;sbn sindhi bhil;sc sardinian;scl shina;scn sicilian;sd sindhi;sei seri;
shu chadian arabic;si sinhala;sip sikkimese;siw siwai;sjr siar-lak;sk slovak;skg sakalava malagasy;
skr saraiki;sl slovenian;sn shona;snc sinaugoro;snk soninke;so somali;sol solos;sps saposa;sq albanian;
sr serbian;src logudorese sardinian;sro campidanese sardinian;ssi sansi;ste liana-seti;sua sulka;
sv swedish;sva svan;sw swahili;szy sakizaya;ta tamil;tan tangale;tar central tarahumara;tay atayal;
tbf mandara;tcf malinaltepec me'phaa;tcy tulu;tdn tondano;tdx tandroy-mahafaly malagasy;te telugu;
tg tajik;tgc tigak;th thai;the chitwania tharu;thq kochila tharu;thr rana tharu;thv tahaggart tamahaq;
ti tigrinya;tig tigre;tio teop;tk turkmen;tkg tesaka malagasy;tkt kathoriya tharu;tli tlingit;
tlp filomena mata-coahuitlán totonac;tn tswana;tok toki pona;tpl tlacoapa me'phaa;tpz tinputz;
tqp tomoip;tr turkish;trp kok borok;trq san martín itunyoso triqui;trv sediq;trw torwali;tt tatar;
ttj tooro;ttr tera;ttu torau;tui tupuri;tul tula;tuq tedaga;tuv turkana;tuy tugen;tvo tidore;tvu tunen;
tw twi;twu termanu;txs tonsea;txy tanosy malagasy;udl wuzlam;ug uighur;uk ukrainian;uki kui (india);
umb umbundu;ur urdu;ush ushojo;uz uzbek;uzn northern uzbek;vai vai;var huarijio;ver mom jango;
vi vietnamese;vmc juxtlahuaca mixtec;vmj ixtayutla mixtec;vmm mitlatongo mixtec;vmp soyaltepec mazatec;
vmz mazatlán mazatec;vot votic;vro võro;wbl wakhi;wci waci gbe;weo wemale;wes cameroon pidgin;wja waja;
wji warji;wo wolof;wof gambian wolof;xh xhosa;xhe khetrani;xka kalkoti;xmf mingrelian;
xmv antankarana malagasy;xmw tsimihety malagasy;xpe liberia kpelle;xti sinicahua mixtec;
xtu cuyamecalco mixtec;yaq yaqui;yav yangben;yay agwagwune;ydd eastern yiddish;ydg yidgha;yer tarok;
yes nyankpa;yi yiddish;yo yoruba;yue cantonese;zga kinga;zgh standard moroccan tamazight;zh chinese;
zoc copainalá zoque;zoh chimalapa zoque;zor rayón zoque;zpv chichicapan zapotec;zpy mazaltepec zapotec;
ztg xanaguía zapotec;ztn santa catarina albarradas zapotec;ztp loxicha zapotec;zts tilquiapan zapotec;
ztu güilá zapotec;zu zulu;zza zaza;
"""
LANGUAGE_NAME_TO_ID: dict[str, str] = _parse_languages(_LANGUAGE_TABLE)
LANGUAGE_IDS: frozenset[str] = frozenset(LANGUAGE_NAME_TO_ID.values())
