"""Settings dialog: sampling (per model), hardware, downloads, interface.

Why every number is a plain line edit plus an inline explanation: an empty field means "the
model file's default" (shown as the placeholder), which a spin box cannot express, and a refused
value must say *why* next to the field — not in a dialog after OK, and not by silently eating the
keystroke as a QValidator does. The ranges come from :data:`app.core.settings_model.LIMITS`, the same
ones the settings file is checked against; Max new tokens is also bounded by the context in use.
OK/Apply stay disabled while any field is invalid.
"""

from __future__ import annotations

import copy
import logging
import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.settings_model import (
    LIMITS,
    MIN_MANUAL_CONTEXT,
    AppSettings,
    HardwareSettings,
    SamplingSettings,
    check_models_folder,
    current_models_dir,
    default_models_path,
)
from runtime.devices import format_bytes

log = logging.getLogger(__name__)

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                   "max_new_tokens", "seed")


_KV_NAME_OF_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def kv_bytes_per_token(precision: str, info: dict[str, Any]) -> int | None:
    """The planner's KV-cache bytes per token of the loaded model for a precision setting ("auto" =
    the model's activation dtype), as the worker put them in ``info``; None where it has no figure."""
    name = _KV_NAME_OF_DTYPE.get(str(info.get("dtype"))) if precision == "auto" else precision
    return (info.get("kv_bytes_per_token") or {}).get(name)


class NumberField(QWidget):
    """A line edit for one number with an inline explanation when the value is refused."""

    validityChanged = Signal()

    def __init__(self, name: str, accessible: str, optional: bool = True, placeholder: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.limit = LIMITS[name]
        self.optional = optional
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        self.edit = QLineEdit()
        self.edit.setAccessibleName(accessible)
        self.edit.setPlaceholderText(placeholder)
        # No QValidator: it silently refuses keystrokes ("-1" became "1", "abc" vanished). Whatever
        # is typed stays in the field and recheck() says why it is refused, as for a value out of range.
        self.error = QLabel()
        self.error.setObjectName("inlineError")
        self.error.setWordWrap(True)
        self.error.setVisible(False)
        self.error.setAccessibleName(accessible + " – error")
        lay.addWidget(self.edit)
        lay.addWidget(self.error)
        self.edit.textChanged.connect(self.recheck)
        self.problem: str | None = None
        self.extra_check = None  # optional callable(value) -> problem or None

    def set_value(self, value: float | int | None) -> None:
        if value is None:
            self.edit.setText("")
        elif self.limit.integer:
            self.edit.setText(str(int(value)))
        else:
            self.edit.setText(f"{float(value):g}")
        self.recheck()

    def value(self) -> float | int | None:
        """The number typed (``None`` when empty); raises ValueError for text that is not one."""
        text = self.edit.text().strip().replace(",", ".")
        if not text:
            return None
        if self.limit.integer:
            try:
                return int(text)  # exact, also for seeds beyond float precision
            except ValueError:
                pass
        number = float(text)
        if not math.isfinite(number):
            raise ValueError(text)
        if self.limit.integer:
            if number != int(number):
                raise ValueError(text)
            return int(number)
        return number

    def explanation(self) -> str:
        """The field's range sentence in the interface language (the English one is in LIMITS)."""
        texts = {
            "temperature": self.tr("Temperature must be between 0 (greedy, always the likeliest token) and 2."),
            "top_p": self.tr("Top-p must be above 0 and at most 1 (1 turns it off)."),
            "top_k": self.tr("Top-k must be a whole number from 0 (off) to 1000."),
            "min_p": self.tr("Min-p must be between 0 (off) and 1."),
            "repetition_penalty": self.tr("Repetition penalty must be between 0.5 and 2 (1 turns it off)."),
            "presence_penalty": self.tr("Presence penalty must be between -2 and 2 (0 turns it off)."),
            "max_new_tokens": self.tr("Max new tokens must be a whole number from 1 to 262144."),
            "seed": self.tr("The seed must be a whole number from 0 to 18446744073709551615 (empty = random)."),
            "context_length": self.tr("Context length must be 0 (Auto) or a whole number of tokens up to 1048576."),
            "vram_cap_gib": self.tr("The VRAM cap must be 0 (no cap) or a size in GiB up to 4096."),
        }
        return texts.get(self.name, self.limit.explanation)

    def recheck(self) -> None:
        text = self.edit.text().strip()
        problem = None
        if not text:
            if not self.optional:
                problem = self.explanation()
        else:
            try:
                value = self.value()
            except (ValueError, OverflowError):
                value = None
            if value is None:
                kind = self.tr("a whole number") if self.limit.integer else self.tr("a number")
                problem = (self.tr("“%1” is not %2.").replace("%1", text).replace("%2", kind) + " "
                           + self.explanation())
            else:
                problem = self.explanation() if self.limit.check(value) else None
                if problem is None and self.extra_check is not None:
                    problem = self.extra_check(value)
        self.problem = problem
        self.error.setText(problem or "")
        self.error.setVisible(problem is not None)
        self.edit.setProperty("invalid", problem is not None)
        self.edit.style().unpolish(self.edit)
        self.edit.style().polish(self.edit)
        self.edit.setAccessibleDescription(problem or "")
        self.validityChanged.emit()


class SettingsDialog(QDialog):
    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.setWindowTitle(self.tr("Settings"))
        self.setAccessibleName(self.tr("Settings"))
        self.resize(640, 600)
        self.settings: AppSettings = copy.deepcopy(window.settings)
        from app.core.settings_model import model_key

        self.model_key = model_key(window.model_path) if window.model_path else ""
        self.model_defaults: dict[str, Any] = dict(window.model_info.get("default_settings") or {})
        self.fields: dict[str, NumberField] = {}
        lay = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self._build_tabs()
        lay.addWidget(self.tabs, 1)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
                                        | QDialogButtonBox.StandardButton.Apply)
        self.buttons.accepted.connect(self.accept_and_apply)
        self.buttons.rejected.connect(self.reject)
        self.buttons.button(QDialogButtonBox.StandardButton.Apply).clicked.connect(self.apply)
        lay.addWidget(self.buttons)
        self.load_from(self.settings)
        for f in self.fields.values():
            f.validityChanged.connect(self._update_buttons)
        self._update_buttons()
        if "temperature" in self.fields:  # typing starts in the first field, not on the tab bar
            self.fields["temperature"].edit.setFocus()

    def _build_tabs(self) -> None:
        self.tabs.setAccessibleName(self.tr("Settings sections"))
        self.tabs.addTab(self._sampling_tab(), self.tr("Sampling"))
        self.tabs.addTab(self._hardware_tab(), self.tr("Hardware"))
        self.tabs.addTab(self._downloads_tab(), self.tr("Downloads"))
        from app.server_page import RemotesPage, ServerPage

        self.server_page = ServerPage(self.window)
        self.remotes_page = RemotesPage(self.window)
        self.tabs.addTab(self.server_page, self.tr("Local server"))
        self.tabs.addTab(self.remotes_page, self.tr("Remote backends"))
        self.server_page.host.textChanged.connect(self._update_buttons)
        self.server_page.enabled.toggled.connect(self._update_buttons)
        self.tabs.addTab(self._interface_tab(), self.tr("Interface"))  # stays last (where users find it)

    def retranslate(self) -> None:
        """Rebuild the tabs in the new language, keeping what the user has typed and the open tab.

        Why rebuild instead of re-setting each text: the tabs hold ~80 strings, several composed
        from values (placeholders with model defaults, the cost line); building them again through
        the same code cannot miss one.
        """
        try:
            values = self.collect()
        except (ValueError, TypeError):  # a half-typed number: keep the last applied values
            values = self.settings
        index = self.tabs.currentIndex()
        self.setWindowTitle(self.tr("Settings"))
        self.setAccessibleName(self.tr("Settings"))
        while self.tabs.count():
            page = self.tabs.widget(0)
            self.tabs.removeTab(0)
            page.deleteLater()
        self.fields = {}
        self._build_tabs()
        self.load_from(values)
        for f in self.fields.values():
            f.validityChanged.connect(self._update_buttons)
        self.tabs.setCurrentIndex(index)
        self._update_buttons()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LanguageChange and hasattr(self, "buttons"):
            self.retranslate()
        super().changeEvent(event)

    # ------------------------------------------------------------------ tabs
    def _number(self, form: QFormLayout, name: str, label: str, optional: bool = True) -> NumberField:
        default = self.model_defaults.get(name)
        placeholder = (self.tr("model default: %1").replace("%1", f"{default:g}" if isinstance(default, float)
                                                           else str(default))
                       if default is not None and optional else (self.tr("model default") if optional else ""))
        if name == "seed":
            placeholder = self.tr("random")
        f = NumberField(name, label, optional, placeholder)
        lab = QLabel(label)
        lab.setBuddy(f.edit)
        form.addRow(lab, f)
        self.fields[name] = f
        return f

    def _sampling_tab(self) -> QWidget:
        w = QWidget()
        outer = QVBoxLayout(w)
        who = Path(self.model_key).name if self.model_key else \
            self.tr("(no model loaded: defaults for models without their own settings)")
        self.sampling_caption = QLabel(self.tr("Sampling for: %1").replace("%1", who))
        self.sampling_caption.setWordWrap(True)
        if self.model_key:  # kept per file: two files of the same name have their own settings
            self.sampling_caption.setToolTip(self.model_key)
            self.sampling_caption.setAccessibleDescription(self.model_key)
        outer.addWidget(self.sampling_caption)
        form = QFormLayout()
        outer.addLayout(form)
        labels = {"temperature": self.tr("Temperature"), "top_p": self.tr("Top-p"), "top_k": self.tr("Top-k"),
                  "min_p": self.tr("Min-p"), "repetition_penalty": self.tr("Repetition penalty"),
                  "presence_penalty": self.tr("Presence penalty"), "max_new_tokens": self.tr("Max new tokens"),
                  "seed": self.tr("Seed")}
        for name in SAMPLING_FIELDS:
            self._number(form, name, labels[name])
        self.fields["max_new_tokens"].extra_check = self._max_new_tokens_check
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setAccessibleName(self.tr("System prompt"))
        self.system_prompt.setPlaceholderText(self.tr("Optional instructions sent before every conversation"))
        self.system_prompt.setMaximumHeight(90)
        lab = QLabel(self.tr("System prompt"))
        lab.setBuddy(self.system_prompt)
        form.addRow(lab, self.system_prompt)
        self.thinking_combo = QComboBox()
        self.thinking_combo.setAccessibleName(self.tr("Thinking"))
        self.thinking_combo.addItem(self.tr("Model default"), None)
        self.thinking_combo.addItem(self.tr("On"), True)
        self.thinking_combo.addItem(self.tr("Off"), False)
        supports = bool(self.window.model_info.get("supports_thinking", True))
        self.thinking_combo.setEnabled(supports)
        if not supports:
            self.thinking_combo.setToolTip(self.tr("The loaded model does not think before answering."))
        form.addRow(self.tr("Thinking"), self.thinking_combo)
        self.effort_combo = QComboBox()
        self.effort_combo.setAccessibleName(self.tr("Reasoning effort"))
        for value, text in (("", self.tr("Model default")), ("low", self.tr("Low")), ("medium", self.tr("Medium")),
                            ("high", self.tr("High"))):
            self.effort_combo.addItem(text, value)
        self.effort_combo.setToolTip(self.tr("Used by models whose chat template accepts a reasoning effort "
                                             "(Ternary-Bonsai 2); other models ignore it."))
        self.effort_combo.setEnabled(supports)
        form.addRow(self.tr("Reasoning effort"), self.effort_combo)
        self.reset_button = QPushButton(self.tr("Reset to model defaults"))
        self.reset_button.setAccessibleName(self.tr("Reset sampling to the model's defaults"))
        self.reset_button.clicked.connect(self.reset_sampling)
        outer.addWidget(self.reset_button, 0, Qt.AlignmentFlag.AlignLeft)
        outer.addStretch(1)
        return w

    def _hardware_tab(self) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.device_combo = QComboBox()
        self.device_combo.setAccessibleName(self.tr("Device"))
        self.device_combo.addItem(self.tr("Auto (best available)"), "auto")
        self.device_combo.addItem(self.tr("CPU"), "cpu")
        self.has_gpu = False
        try:
            from runtime.devices import detect_gpus

            for g in detect_gpus():
                self.device_combo.addItem(f"GPU {g.index}: {g.name} ({format_bytes(g.total_bytes)})", f"cuda:{g.index}")
                self.has_gpu = True
        except Exception as exc:  # noqa: BLE001 - no torch CUDA: CPU only
            log.debug("GPU detection failed: %s", exc)
        form.addRow(self.tr("Device"), self.device_combo)

        self.auto_context = QCheckBox(self.tr("Auto (largest that fits, from the planner)"))
        self.auto_context.setAccessibleName(self.tr("Automatic context length"))
        self.auto_context.toggled.connect(self._context_mode_changed)
        form.addRow(self.tr("Context length"), self.auto_context)
        ctx = self._number(form, "context_length", self.tr("Manual context length (tokens)"), optional=True)
        ctx.edit.setPlaceholderText(self.tr("tokens, e.g. 8192"))
        max_ctx = int(self.window.model_info.get("max_context") or 0)

        def ctx_check(value: float) -> str | None:
            if value and value < MIN_MANUAL_CONTEXT:
                return self.tr("A manual context length must be at least %1 tokens.").replace("%1", str(MIN_MANUAL_CONTEXT))
            if max_ctx and value > max_ctx:
                return self.tr("This model supports at most %1 tokens.").replace("%1", str(max_ctx))
            return None

        ctx.extra_check = ctx_check
        ctx.edit.textChanged.connect(self._update_cost)
        ctx.edit.textChanged.connect(self._recheck_max_new_tokens)
        self.cost_label = QLabel()
        self.cost_label.setWordWrap(True)
        self.cost_label.setAccessibleName(self.tr("Memory cost of the context length"))
        form.addRow("", self.cost_label)

        self.offload_combo = QComboBox()
        self.offload_combo.setAccessibleName(self.tr("Offload policy"))
        for value, text in (("auto", self.tr("Automatic (planner decides)")),
                            ("stream", self.tr("Stream layers to the GPU")),
                            ("mapped", self.tr("Read layers from host memory (zero-copy)")),
                            ("cpu", self.tr("Compute offloaded layers on the CPU"))):
            self.offload_combo.addItem(text, value)
        self.offload_combo.setToolTip(self.tr("When a model does not fit in VRAM, some layers stay in RAM: their "
                                              "weights are streamed to the GPU for every token, or the GPU reads them "
                                              "in place from RAM (zero-copy: no staging buffers, same results as "
                                              "with everything in VRAM), or the CPU computes them. Automatic picks "
                                              "the fastest one per token."))
        if not self.has_gpu:
            self.offload_combo.setEnabled(False)
            self.offload_combo.setToolTip(self.tr("Offload applies to GPUs: it decides how layers that do not fit "
                                                  "in VRAM run. This computer has no usable GPU, so every layer "
                                                  "runs on the CPU."))
        self.offload_combo.setAccessibleDescription(self.offload_combo.toolTip())
        form.addRow(self.tr("Offload policy"), self.offload_combo)
        from app.gauges import placement_text

        plan = self.window.model_info.get("plan") or {}
        placement = QLabel(self.tr("Now: %1").replace("%1", placement_text(plan) if plan else "–"))
        placement.setWordWrap(True)
        placement.setAccessibleName(self.tr("Current layer placement"))
        self.placement_label = placement
        form.addRow(self.tr("Layer placement"), placement)

        self.kv_combo = QComboBox()
        self.kv_combo.setAccessibleName(self.tr("KV-cache precision"))
        for value, text in (("auto", self.tr("Auto (fp32 on CPU, bf16 on GPU)")), ("fp16", "fp16"), ("bf16", "bf16"),
                            ("int8", self.tr("int8 (8-bit, half the memory)"))):
            self.kv_combo.addItem(text, value)
        self.kv_combo.currentIndexChanged.connect(self._update_cost)
        form.addRow(self.tr("KV-cache precision"), self.kv_combo)
        kv_note = QLabel(self.tr("int8 stores the conversation memory in 8 bits: about twice the context fits, "
                                 "at a small accuracy cost. Used from the next model load."))
        kv_note.setWordWrap(True)
        kv_note.setAccessibleName(self.tr("KV-cache precision trade-off"))
        self.kv_note = kv_note
        self.kv_combo.setToolTip(kv_note.text())
        form.addRow("", kv_note)
        self.decode_combo = QComboBox()
        self.decode_combo.setAccessibleName(self.tr("Decode precision"))
        for value, text in (("int8", self.tr("Fast (8-bit activations)")), ("exact", self.tr("Exact"))):
            self.decode_combo.addItem(text, value)
        form.addRow(self.tr("Decode precision"), self.decode_combo)
        decode_note = QLabel(self.tr("Fast rounds each token's activations to 8 bits inside the matrix "
                                     "kernels, like llama.cpp: on a GPU about 1.6x faster answers, on the CPU "
                                     "faster where the processor has 8-bit dot products; slightly different "
                                     "wording. Exact keeps full precision. Used from the next model load."))
        decode_note.setWordWrap(True)
        decode_note.setAccessibleName(self.tr("Decode precision trade-off"))
        self.decode_combo.setToolTip(decode_note.text())
        form.addRow("", decode_note)
        self._number(form, "vram_cap_gib", self.tr("VRAM cap (GiB, 0 = none)"), optional=True)
        self.fields["vram_cap_gib"].edit.setPlaceholderText("0")
        note = QLabel(self.tr("Hardware changes reload the model when you press OK."))
        note.setWordWrap(True)
        form.addRow("", note)
        return w

    def _downloads_tab(self) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.source_combo = QComboBox()
        self.source_combo.setAccessibleName(self.tr("Download source"))
        for value, text in (("auto", self.tr("Auto (Hugging Face, then ModelScope)")), ("hf", "Hugging Face"),
                            ("modelscope", "ModelScope")):
            self.source_combo.addItem(text, value)
        form.addRow(self.tr("Source"), self.source_combo)
        self.hf_endpoint = QLineEdit()
        self.hf_endpoint.setAccessibleName(self.tr("Hugging Face mirror endpoint"))
        self.hf_endpoint.setPlaceholderText("https://huggingface.co  (e.g. https://hf-mirror.com)")
        self.ms_endpoint = QLineEdit()
        self.ms_endpoint.setAccessibleName(self.tr("ModelScope endpoint"))
        self.ms_endpoint.setPlaceholderText("https://modelscope.cn")
        self.endpoint_error = QLabel()
        self.endpoint_error.setObjectName("inlineError")
        self.endpoint_error.setVisible(False)
        self.endpoint_error.setWordWrap(True)
        for e in (self.hf_endpoint, self.ms_endpoint):
            e.textChanged.connect(self._update_buttons)
        form.addRow(self.tr("Hugging Face endpoint"), self.hf_endpoint)
        form.addRow(self.tr("ModelScope endpoint"), self.ms_endpoint)
        form.addRow("", self.endpoint_error)
        folder_row = QWidget()
        fl = QHBoxLayout(folder_row)
        fl.setContentsMargins(0, 0, 0, 0)
        self.models_dir_edit = QLineEdit()
        self.models_dir_edit.setAccessibleName(self.tr("Models folder"))
        self.models_dir_edit.setToolTip(self.tr("Where downloaded models are stored. Models already downloaded stay "
                                                "in their folder."))
        self.models_dir_browse = QPushButton(self.tr("Choose…"))
        self.models_dir_browse.setAccessibleName(self.tr("Choose the models folder"))
        self.models_dir_browse.clicked.connect(self.choose_models_dir)
        fl.addWidget(self.models_dir_edit, 1)
        fl.addWidget(self.models_dir_browse)
        form.addRow(self.tr("Models folder"), folder_row)
        self.models_dir_info = QLabel()
        self.models_dir_info.setWordWrap(True)
        self.models_dir_info.setAccessibleName(self.tr("Models folder check"))
        form.addRow("", self.models_dir_info)
        self.models_dir_edit.textChanged.connect(self._update_buttons)
        self.token_widgets: dict[str, tuple[QLabel, QLineEdit]] = {}
        for provider, title in (("huggingface", "Hugging Face"), ("modelscope", "ModelScope")):
            row = QWidget()
            rl = QHBoxLayout(row)
            rl.setContentsMargins(0, 0, 0, 0)
            status = QLabel()
            status.setAccessibleName(self.tr("%1 token status").replace("%1", title))
            edit = QLineEdit()
            edit.setEchoMode(QLineEdit.EchoMode.Password)
            edit.setPlaceholderText(self.tr("paste a new token"))
            edit.setAccessibleName(self.tr("New %1 token").replace("%1", title))
            save = QPushButton(self.tr("Save"))
            save.setAccessibleName(self.tr("Save the %1 token in the keyring").replace("%1", title))
            save.clicked.connect(lambda _=False, p=provider: self.save_token(p))
            remove = QPushButton(self.tr("Remove"))
            remove.setAccessibleName(self.tr("Remove the %1 token").replace("%1", title))
            remove.clicked.connect(lambda _=False, p=provider: self.remove_token(p))
            rl.addWidget(status)
            rl.addWidget(edit, 1)
            rl.addWidget(save)
            rl.addWidget(remove)
            form.addRow(self.tr("%1 token").replace("%1", title), row)
            self.token_widgets[provider] = (status, edit)
        self.token_message = QLabel()
        self.token_message.setWordWrap(True)
        self.token_message.setAccessibleName(self.tr("Token message"))
        form.addRow("", self.token_message)
        self._refresh_tokens()
        return w

    def _interface_tab(self) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.language_combo = QComboBox()
        self.language_combo.setAccessibleName(self.tr("Interface language"))
        self.language_combo.addItem("English", "en")
        self.language_combo.addItem("简体中文", "zh_CN")
        form.addRow(self.tr("Language"), self.language_combo)
        self.theme_combo = QComboBox()
        self.theme_combo.setAccessibleName(self.tr("Theme"))
        self.theme_combo.addItem(self.tr("Light"), "light")
        self.theme_combo.addItem(self.tr("Dark"), "dark")
        self.theme_combo.addItem(self.tr("System (follow the desktop)"), "system")
        form.addRow(self.tr("Theme"), self.theme_combo)
        note = QLabel(self.tr("The theme and the language change when you click Apply or OK; no restart is needed."))
        note.setWordWrap(True)
        form.addRow("", note)
        return w

    # ------------------------------------------------------------------ values
    def load_from(self, s: AppSettings) -> None:
        sampling = s.sampling_for(self.model_key)
        for name in SAMPLING_FIELDS:
            self.fields[name].set_value(getattr(sampling, name))
        self.system_prompt.setPlainText(sampling.system_prompt)
        self._select(self.thinking_combo, sampling.enable_thinking)
        self._select(self.effort_combo, sampling.reasoning_effort)
        hw = s.hardware
        if self.device_combo.findData(hw.device) < 0:
            self.device_combo.addItem(hw.device, hw.device)
        self._select(self.device_combo, hw.device)
        self.auto_context.setChecked(hw.context_length == 0)
        self.fields["context_length"].set_value(hw.context_length or None)
        self._context_mode_changed(hw.context_length == 0)
        self._select(self.offload_combo, hw.offload_policy)
        self._select(self.kv_combo, hw.kv_cache_precision)
        self._select(self.decode_combo, hw.decode_precision)
        self.fields["vram_cap_gib"].set_value(hw.vram_cap_gib or None)
        self._select(self.source_combo, s.downloads.source)
        self.hf_endpoint.setText(s.downloads.hf_endpoint)
        self.ms_endpoint.setText(s.downloads.modelscope_endpoint)
        self.models_dir_edit.setText(s.downloads.models_dir or str(current_models_dir()))
        self._select(self.language_combo, s.interface.language)
        self._select(self.theme_combo, s.interface.theme)
        self.server_page.load(s.server)
        self.remotes_page.load(s.remotes)
        self._update_cost()

    @staticmethod
    def _select(combo: QComboBox, value: Any) -> None:
        for i in range(combo.count()):
            if combo.itemData(i) == value:
                combo.setCurrentIndex(i)
                return

    def collect(self) -> AppSettings:
        """Settings from the widgets (only valid when :meth:`problems` is empty)."""
        s = copy.deepcopy(self.settings)
        values = {name: self.fields[name].value() for name in SAMPLING_FIELDS}
        sampling = SamplingSettings(**values, system_prompt=self.system_prompt.toPlainText(),
                                    enable_thinking=self.thinking_combo.currentData(),
                                    reasoning_effort=self.effort_combo.currentData() or "")
        s.set_sampling(self.model_key, sampling)
        ctx = 0 if self.auto_context.isChecked() else int(self.fields["context_length"].value() or 0)
        s.hardware = HardwareSettings(device=self.device_combo.currentData(), context_length=ctx,
                                      offload_policy=self.offload_combo.currentData(),
                                      kv_cache_precision=self.kv_combo.currentData(),
                                      decode_precision=self.decode_combo.currentData(),
                                      vram_cap_gib=float(self.fields["vram_cap_gib"].value() or 0.0))
        s.downloads.source = self.source_combo.currentData()
        s.downloads.hf_endpoint = self.hf_endpoint.text().strip()
        s.downloads.modelscope_endpoint = self.ms_endpoint.text().strip()
        chosen = self.models_dir_edit.text().strip()
        if chosen:
            path = Path(chosen).expanduser().resolve()
            s.downloads.models_dir = "" if path == default_models_path() else str(path)
        s.interface.language = self.language_combo.currentData()
        s.interface.theme = self.theme_combo.currentData()
        s.server = self.server_page.values()
        s.remotes = dict(self.remotes_page.remotes)
        return s

    def problems(self) -> list[str]:
        out = [f.problem for name, f in self.fields.items() if f.problem and f.isEnabled()]
        if not self.auto_context.isChecked() and not self.fields["context_length"].value():
            out.append(self.tr("Enter a context length or choose Auto."))
        endpoint_problems = []
        for e in (self.hf_endpoint, self.ms_endpoint):
            t = e.text().strip()
            bad = bool(t) and not (t.startswith("https://") or t.startswith("http://"))
            e.setProperty("invalid", bad)
            e.style().unpolish(e)
            e.style().polish(e)
            if bad:
                endpoint_problems.append(self.tr("A mirror endpoint must be a web address starting with https:// "
                                                 "or http://."))
        self.endpoint_error.setText(endpoint_problems[0] if endpoint_problems else "")
        self.endpoint_error.setVisible(bool(endpoint_problems))
        folder_problems = []
        if hasattr(self, "models_dir_edit"):
            check = check_models_folder(self.models_dir_edit.text())
            if check.reason:
                folder_problems.append(self.folder_problem_text(check.reason))
                self.models_dir_info.setText(folder_problems[-1])
            else:
                self.models_dir_info.setText(self.tr("%1 free.").replace("%1", format_bytes(check.free_bytes))
                                             + ("" if check.exists else " " + self.tr("The folder will be created.")))
            self.models_dir_info.setObjectName("inlineError" if check.reason else "")
            self.models_dir_edit.setProperty("invalid", bool(check.reason))
            for widget in (self.models_dir_info, self.models_dir_edit):
                widget.style().unpolish(widget)
                widget.style().polish(widget)
        server_problems = self.server_page.problems() if hasattr(self, "server_page") else []
        return out + endpoint_problems + folder_problems + server_problems

    def folder_problem_text(self, reason: str) -> str:
        """The translated sentence for a :func:`check_models_folder` reason code."""
        return {
            "empty": self.tr("Choose a folder for the models."),
            "relative": self.tr("Enter a full path (for example /home/me/models)."),
            "not_dir": self.tr("This path is a file, not a folder."),
            "not_creatable": self.tr("This folder does not exist and cannot be created here."),
            "not_writable": self.tr("This folder is not writable: downloads could not be saved in it."),
        }[reason]

    def choose_models_dir(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, self.tr("Choose the models folder"),
                                                  self.models_dir_edit.text())
        if folder:
            self.models_dir_edit.setText(folder)

    def _update_buttons(self) -> None:
        ok = not self.problems()
        for b in (QDialogButtonBox.StandardButton.Ok, QDialogButtonBox.StandardButton.Apply):
            self.buttons.button(b).setEnabled(ok)

    def context_in_use(self) -> int:
        """The context a reply will have: the manual length typed here, else the loaded model's (0 = unknown)."""
        if hasattr(self, "auto_context") and not self.auto_context.isChecked() and "context_length" in self.fields:
            try:
                typed = self.fields["context_length"].value()
            except (ValueError, OverflowError):
                typed = None
            if typed:
                return int(typed)
        return int(self.window.model_info.get("context_length") or 0)

    def _max_new_tokens_check(self, value: float) -> str | None:
        """An answer cannot be longer than the context minus the prompt (at least one token)."""
        ctx = self.context_in_use()
        if ctx and value > ctx - 1:
            return (self.tr("At most %1: the context in use holds %2 tokens, and the prompt takes at least one.")
                    .replace("%1", str(ctx - 1)).replace("%2", str(ctx)))
        return None

    def _recheck_max_new_tokens(self, *_: object) -> None:
        if "max_new_tokens" in self.fields:
            self.fields["max_new_tokens"].recheck()

    def _context_mode_changed(self, auto: bool) -> None:
        self._recheck_max_new_tokens()
        self.fields["context_length"].setEnabled(not auto)
        self._update_cost()
        if hasattr(self, "buttons"):
            self._update_buttons()

    def _update_cost(self) -> None:
        """Memory a manual context would need, from the loaded model's plan and memory stats."""
        info = self.window.model_info
        plan = info.get("plan") or {}
        mem = self.window.gauges.last_memory or {}
        if not info:
            self.cost_label.setText(self.tr("Load a model to see what a context length costs."))
            return
        cur_ctx = int(info.get("context_length") or 0)
        kv_now = int(mem.get("kv_cache_bytes") or (plan.get("predicted_breakdown") or {}).get("kv_cache") or 0)
        chosen = self.kv_combo.currentData()
        per_token: float = kv_bytes_per_token(chosen, info) or 0
        if not per_token and chosen == self.window.settings.hardware.kv_cache_precision:
            per_token = kv_now / cur_ctx if cur_ctx and kv_now else 0  # what the loaded cache measures
        if self.auto_context.isChecked():
            self.cost_label.setText(self.tr("Auto: the planner picked %1 tokens (KV cache %2).")
                                    .replace("%1", str(cur_ctx)).replace("%2", format_bytes(kv_now)))
            return
        ctx = self.fields["context_length"].value() or 0
        if not per_token or not ctx:
            self.cost_label.setText("")
            return
        weights = int(info.get("weight_bytes") or 0)
        kv = int(per_token * ctx)
        device = str(info.get("device", "cpu"))
        if device.startswith("cuda"):
            avail = mem.get("device_total_bytes") or plan.get("budget_bytes") or 0
            where = self.tr("VRAM")
        else:
            avail = mem.get("ram_available_bytes", 0) + kv_now
            where = self.tr("RAM")
        text = self.tr("%1 tokens need a %2 KV cache; with the %3 of weights about %4 of %5 (%6 available).") \
            .replace("%1", str(int(ctx))).replace("%2", format_bytes(kv)).replace("%3", format_bytes(weights)) \
            .replace("%4", format_bytes(weights + kv)).replace("%5", where).replace("%6", format_bytes(avail))
        if avail and weights + kv > avail:
            text += " " + self.tr("This will not fit.")
        self.cost_label.setText(text)

    def reset_sampling(self) -> None:
        for name in SAMPLING_FIELDS:
            self.fields[name].set_value(None)
        self.system_prompt.setPlainText("")
        self._select(self.thinking_combo, None)
        self._select(self.effort_combo, "")

    # ------------------------------------------------------------------ tokens
    def _refresh_tokens(self) -> None:
        try:
            from runtime.hub.tokens import TokenStore

            store = TokenStore()
            for provider, (status, _edit) in self.token_widgets.items():
                status.setText(self.tr("stored: ••••••••") if store.get(provider) else self.tr("none"))
        except Exception as exc:  # noqa: BLE001
            for status, _edit in self.token_widgets.values():
                status.setText(self.tr("keyring unavailable"))
            log.warning("token store unavailable: %s", type(exc).__name__)

    def save_token(self, provider: str) -> None:
        from runtime.hub.tokens import TokenStore

        status, edit = self.token_widgets[provider]
        value = edit.text().strip()
        if not value:
            self.token_message.setText(self.tr("Paste a token first."))
            return
        try:
            message = TokenStore().set(provider, value)
        except Exception as exc:  # noqa: BLE001
            message = self.tr("Could not store the token: %1").replace("%1", type(exc).__name__)
        edit.clear()
        self.token_message.setText(message)
        self._refresh_tokens()

    def remove_token(self, provider: str) -> None:
        from runtime.hub.tokens import TokenStore

        try:
            message = TokenStore().clear(provider)
        except Exception as exc:  # noqa: BLE001
            message = self.tr("Could not remove the token: %1").replace("%1", type(exc).__name__)
        self.token_message.setText(message)
        self._refresh_tokens()

    # ------------------------------------------------------------------ apply
    def apply(self) -> bool:
        if self.problems():
            return False
        new = self.collect()
        errors = new.validate()
        if errors:
            self.window.show_error(errors[0][1])
            return False
        old = self.window.settings
        old_models = current_models_dir()
        self.window.settings = new
        self.settings = copy.deepcopy(new)
        self.window.save_settings()
        self._save_hub_settings(new)
        new_models = current_models_dir()
        if new_models != old_models:
            try:
                new_models.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # checked a moment ago; a disk can still vanish
                self.window.show_error(self.tr("Could not create the models folder: %1").replace("%1", str(exc)))
                return False
            self.window.show_notice(
                self.tr("New downloads go to %1. Models already in %2 stay there; import them from Models… → "
                        "Import if you want to use them.").replace("%1", str(new_models)).replace("%2", str(old_models)))
        self.window.apply_settings(old)
        return True

    def _save_hub_settings(self, s: AppSettings) -> None:
        """The hub reads source and endpoints from its own file: keep it in step."""
        try:
            from runtime.hub.settings import DEFAULT_HF_ENDPOINT, DEFAULT_MODELSCOPE_ENDPOINT, HubSettings

            hub = HubSettings(source=s.downloads.source, hf_endpoint=s.downloads.hf_endpoint or DEFAULT_HF_ENDPOINT,
                              modelscope_endpoint=s.downloads.modelscope_endpoint or DEFAULT_MODELSCOPE_ENDPOINT,
                              models_dir=s.downloads.models_dir)
            hub.save()
        except Exception as exc:  # noqa: BLE001
            self.window.show_error(self.tr("Could not save the download settings: %1").replace("%1", str(exc)))

    def accept_and_apply(self) -> None:
        if self.apply():
            self.accept()
