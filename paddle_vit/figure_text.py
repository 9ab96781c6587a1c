"""The words on the figures, in English or in Chinese for the walkthrough's readers.

The Chinese notebooks (notebooks/zh-CN/) run the same code cells as the English ones; only their
first cell's ``LANGUAGE`` differs. It calls ``viz.use_language(LANGUAGE)``, which returns a
`FigureText` (the notebooks call it ``T``) that gives the words of a figure drawn in the notebook,
``T("epoch")``, and makes it the one the library's own figures read (`current`). English is the
key: a phrase with no Chinese entry stays English, and the tests hold every phrase the notebooks
and the library's figures use to an entry (``strict=True``).

Chinese glyphs need a CJK font, which matplotlib does not ship: `find_cjk_font` looks for one on
the machine (Noto Sans CJK, Source Han Sans, WenQuanYi, SimHei, Microsoft YaHei, PingFang...).
Where none is, the figures stay in English and one warning line says what to install, rather
than boxes in place of every character.
"""
import logging

logger = logging.getLogger("paddle_vit")

LANGUAGES = ("en", "zh-CN")
# font families with Simplified Chinese glyphs, the better first: Linux (Noto, Source Han, WenQuanYi),
# Windows (Microsoft YaHei, SimHei), macOS (PingFang, Heiti, Hiragino), then the other CJK cuts
CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Micro Hei",
                "WenQuanYi Zen Hei", "Microsoft YaHei", "SimHei", "PingFang SC", "Heiti SC", "Hiragino Sans GB",
                "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Serif CJK SC", "AR PL UMing CN", "Droid Sans Fallback")
# what the file names of those fonts contain, to find one matplotlib's font cache does not know yet
CJK_FILE_MARKS = ("cjk", "sourcehan", "wqy", "simhei", "msyh", "pingfang", "droidsansfallback")
INSTALL_HINT = ("apt install fonts-noto-cjk (Debian, Ubuntu), or any font of Noto Sans CJK SC / Source Han Sans SC, "
                "then restart the kernel")

# English (the key, with its {fields}) -> Chinese. Grouped by where the phrase is drawn.
ZH_CN = {
    # notebook 01 (walkthrough)
    "{rows} x {cols} patches of {P} x {P} pixels": "{rows} x {cols} 个图像块，每块 {P} x {P} 像素",
    "the start of the sequence: patches in row-major order": "序列的开头：图像块按行优先顺序排列",
    "head {head}: all {n} x {n}": "第 {head} 个头：全部 {n} x {n}",
    "head {head}: class-token row": "第 {head} 个头：类别标记那一行",
    "train (label smoothing 0.1)": "训练集（标签平滑 0.1）",
    "val": "验证集",
    "epoch": "轮次（epoch）",
    "cross-entropy": "交叉熵",
    "val top-1": "验证集 top-1",
    "digit {digit}": "数字 {digit}",
    # notebook 02 (position embeddings)
    "a digit": "一个数字",
    "its patches shuffled": "图像块打乱后",
    "validation images": "验证图像",
    "patches shuffled": "图像块打乱",
    "chance": "随机猜测",
    "learned, resampled to 8 x 8 and fine-tuned": "learned，重采样到 8 x 8 并微调后",
    # notebook 03 (data size)
    "digit": "数字",
    "shifted 4 px": "右移 4 像素",
    "stem map, ch. 0": "stem 特征图，通道 0",
    "... of the shifted": "……右移后的",
    # viz.attention_figure
    "attention rollout ({query} tokens) and the last layer's class-token attention per head":
        "注意力展开（{query} 标记）与最后一层每个头中类别标记发出的注意力",
    "class": "类别",  # the rollout's query: how the model pools its tokens
    "patches": "图像块",
    "all": "所有",
    "input": "输入",
    "rollout": "注意力展开",
    "head {head}": "第 {head} 个头",
    "image {number}": "图像 {number}",
    "predicted {label} ({probability})": "预测 {label}（{probability}）",
    # viz.confusion_matrix_figure
    "predicted": "预测",
    "true": "真实",
    # viz.position_similarity_figure
    "input patch column": "输入图像块的列",
    "input patch row": "输入图像块的行",
    "cosine similarity": "余弦相似度",
    "position embedding similarity ({kind})": "位置编码相似度（{kind}）",
    # viz.embedding_filters_figure
    "{which}: first {count} principal components": "{which}：前 {count} 个主成分",
    "the hybrid's ResNet stem filters": "混合模型 ResNet stem 的滤波器",
    "patch-embedding filters": "图像块嵌入的滤波器",
    "({percent}% of the variance of the {filters} filters of {shape})": "（占 {filters} 个 {shape} 滤波器方差的 {percent}%）",
    # viz.attention_distance_figure
    "uniform attention": "均匀注意力",
    "network depth (layer)": "网络深度（层）",
    "mean attention distance (pixels)": "平均注意力距离（像素）",
    "{images} of {height}x{width}, patches of {patch}": "{images}，{height}x{width}，图像块 {patch}",
    "{count} images": "{count} 张图像",
    "1 image": "1 张图像",
    # experiments.resolution_figure
    "trained at {size} px": "训练分辨率 {size} 像素",
    "test resolution (pixels)": "测试分辨率（像素）",
    "accuracy at other resolutions, no fine-tuning": "其他分辨率下的准确率（未微调）",
    # experiments.data_size_figure
    "{family} ({thousands}k parameters)": "{family}（{thousands}k 参数）",
    "trained on the subset: validation top-1": "在子集上训练：验证集 top-1",
    "frozen representation: linear {shots}-shot top-1": "冻结表示：线性 {shots}-shot top-1",
    "training images (digits, stratified subsets)": "训练图像数（digits，分层子集）",
    "accuracy on the {count} validation digits": "{count} 个验证数字上的准确率",
    "{seeds} seeds per point (mean, std); {steps} steps of {batch} for every run; {shots} shots per class drawn "
    "from the run's own subset, {draws} draws":
        "每个点 {seeds} 个种子（均值、标准差）；每次运行 {steps} 步、批大小 {batch}；每类 {shots} 个样本，"
        "取自该运行自己的子集，抽取 {draws} 次",
    # experiments.deit_budget_figure
    "teacher: ResNet ({thousands}k parameters)": "教师：ResNet（{thousands}k 参数）",
    "ViT, no teacher": "ViT，无教师",
    "ViT, hard": "ViT，硬蒸馏",
    "ViT, soft": "ViT，软蒸馏",
    "validation top-1 (student: mean of its two heads)": "验证集 top-1（学生：两个头的平均）",
    "agreement with the teacher on the validation digits": "在验证数字上与教师预测一致的比例",
    "DeiT's recipe, {steps} steps of {batch} per run ({epochs} epochs); {seeds} seeds per point (mean, std)":
        "DeiT 的训练配方，每次运行 {steps} 步、批大小 {batch}（{epochs} 个 epoch）；每个点 {seeds} 个种子（均值、标准差）",
}
TABLES = {"zh-CN": ZH_CN}


class FigureText:
    """The words of a figure in `language` ("en" or "zh-CN"): ``text("head {head}", head=2)``.

    `font` is the CJK font family the figures use (None for English). `strict`: a phrase with no
    entry raises KeyError instead of staying English (the tests' setting)."""

    def __init__(self, language="en", font=None, strict=False):
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, got {language!r}")
        self.language, self.font, self.strict = language, font, strict

    def __call__(self, english, **fields):
        table = TABLES.get(self.language)
        if table is None:
            phrase = english
        elif english in table:
            phrase = table[english]
        elif self.strict:
            raise KeyError(f"no {self.language} words for the figure text {english!r} (paddle_vit/figure_text.py)")
        else:
            phrase = english
        return phrase.format(**fields) if fields else phrase

    def __repr__(self):
        return f"FigureText({self.language!r}, font={self.font!r})"


ENGLISH = FigureText("en")
_current = ENGLISH


def current():
    """The `FigureText` the library's figures use: English unless `use_language` chose another."""
    return _current


def find_cjk_font():
    """The first family of `CJK_FAMILIES` that matplotlib can draw with, or None. Fonts installed
    after matplotlib built its font cache are found on disk and added."""
    from matplotlib import font_manager

    def known():
        names = {entry.name for entry in font_manager.fontManager.ttflist}
        return next((family for family in CJK_FAMILIES if family in names), None)

    family = known()
    if family is None:
        for path in font_manager.findSystemFonts():
            lowered = path.lower()
            if any(mark in lowered for mark in CJK_FILE_MARKS):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # an unreadable font file: look at the next
                    continue
        family = known()
    return family


_ORIGINAL_FONTS = None  # matplotlib's font settings before use_language changed them


def use_language(language="en"):
    """Draw the figures' words in `language` from now on, in this process: sets `current` for the
    library's figures and, for Chinese, puts a CJK font first in matplotlib's sans-serif list (with
    its own fonts after it for the glyphs the CJK font lacks). Returns the `FigureText`. With no
    CJK font on the machine, the figures stay English and one warning line names what to install."""
    global _current, _ORIGINAL_FONTS
    import matplotlib

    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    if _ORIGINAL_FONTS is None:
        _ORIGINAL_FONTS = {key: matplotlib.rcParams[key] for key in ("font.sans-serif", "axes.unicode_minus")}
    matplotlib.rcParams.update(_ORIGINAL_FONTS)
    if language == "en":
        _current = ENGLISH
        return _current
    font = find_cjk_font()
    if font is None:
        logger.warning("no Chinese font on this machine: the figures' words stay in English (%s)", INSTALL_HINT)
        _current = ENGLISH
        return _current
    others = [name for name in _ORIGINAL_FONTS["font.sans-serif"] if name != font]
    matplotlib.rcParams["font.sans-serif"] = [font] + others
    matplotlib.rcParams["axes.unicode_minus"] = False  # the ASCII hyphen: every CJK font has it
    _current = FigureText(language, font)
    return _current
