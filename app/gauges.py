"""Live gauges: memory (VRAM process/device, RAM), speed, time to first token, context fill,
where the layers run, and a small chart of the last generations.

Why: users asked peers for exactly these (LM Studio removed its context meter and got bug
reports; GPT4All and the Ollama app show no memory at all). Every number comes from the engine
(``memory_stats()``, ``DoneEvent.stats``, ``info.plan``); the only GUI-side figure is the *live*
tokens/s while streaming (pieces received / seconds since the first one), replaced by the
engine's own decode speed when the reply ends.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QFormLayout, QFrame, QLabel, QProgressBar, QSizePolicy, QVBoxLayout, QWidget

from runtime.devices import format_bytes


def format_seconds(seconds: float) -> str:
    """A duration for a gauge: milliseconds below one second, so fast replies never read "0.00 s"."""
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.0095 else f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


@dataclass
class GenerationPoint:
    tok_s: float
    peak_bytes: int


class HistoryChart(QWidget):
    """Bars: decode tok/s of the last generations; line: peak memory (own scale)."""

    def __init__(self, capacity: int = 20, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.points: deque[GenerationPoint] = deque(maxlen=capacity)
        self.setMinimumHeight(80)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAccessibleName(self.tr("Speed and memory of the last generations"))

    def add(self, tok_s: float, peak_bytes: int) -> None:
        self.points.append(GenerationPoint(tok_s, peak_bytes))
        last = self.points[-1]
        self.setAccessibleDescription(self.tr("Last: %1 tokens/s, peak %2").replace("%1", f"{last.tok_s:.1f}")
                                      .replace("%2", format_bytes(last.peak_bytes)))
        self.update()

    def paintEvent(self, event: object) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        r = QRectF(self.rect()).adjusted(2, 14, -2, -2)
        p.setPen(QPen(pal.mid().color()))
        p.drawRect(r)
        p.setPen(pal.text().color())
        font = p.font()
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.8))
        p.setFont(font)
        if not self.points:
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, self.tr("No generations yet"))
            p.end()
            return
        max_speed = max(pt.tok_s for pt in self.points) or 1.0
        max_mem = max(pt.peak_bytes for pt in self.points) or 1
        n = self.points.maxlen or len(self.points)
        w = r.width() / n
        bar = QColor(pal.highlight().color())
        bar.setAlpha(170)
        for i, pt in enumerate(self.points):
            h = (r.height() - 4) * pt.tok_s / max_speed
            p.fillRect(QRectF(r.left() + i * w + 1, r.bottom() - h, max(w - 2, 1), h), bar)
        path = QPainterPath()
        for i, pt in enumerate(self.points):
            y = r.bottom() - (r.height() - 4) * pt.peak_bytes / max_mem
            q = QPointF(r.left() + i * w + w / 2, y)
            path.moveTo(q) if i == 0 else path.lineTo(q)
        p.setPen(QPen(QColor("#d9822b"), 2))
        p.drawPath(path)
        p.setPen(pal.text().color())
        p.drawText(QRectF(r.left(), 0, r.width(), 14), Qt.AlignmentFlag.AlignLeft,
                   self.tr("tok/s (max %1)").replace("%1", f"{max_speed:.1f}"))
        p.setPen(QColor("#d9822b"))
        p.drawText(QRectF(r.left(), 0, r.width(), 14), Qt.AlignmentFlag.AlignRight,
                   self.tr("peak mem (max %1)").replace("%1", format_bytes(max_mem)))
        p.end()


class GaugePanel(QFrame):
    """The gauge column. Feed it with :meth:`set_model`, :meth:`update_memory`,
    :meth:`generation_started`, :meth:`pieces_received`, :meth:`generation_done`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("gaugePanel")
        self.setAccessibleName(self.tr("Live gauges"))
        self.setFrameShape(QFrame.Shape.StyledPanel)
        outer = QVBoxLayout(self)
        self.title = title = QLabel()
        title.setObjectName("panelTitle")
        outer.addWidget(title)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        outer.addLayout(form)

        def bar(name: str) -> QProgressBar:
            b = QProgressBar()
            b.setRange(0, 1000)
            b.setValue(0)
            b.setTextVisible(True)
            b.setFormat("–")
            b.setAccessibleName(name)
            return b

        def value(name: str) -> QLabel:
            lab = QLabel("–")
            lab.setAccessibleName(name)
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            # a longer number wraps inside the fixed column instead of widening the panel
            lab.setWordWrap(True)
            lab.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            return lab

        self.model_label = value(self.tr("Model"))
        self.device_label = value(self.tr("Device"))
        self.layers_label = value(self.tr("Layers"))
        self.vram_process_bar = bar(self.tr("VRAM used by this app"))
        self.vram_device_bar = bar(self.tr("VRAM used on the device"))
        self.ram_bar = bar(self.tr("RAM used by this app"))
        self.context_bar = bar(self.tr("Context fill"))
        self.speed_label = value(self.tr("Tokens per second"))
        self.prefill_label = value(self.tr("Prompt processing speed"))
        self.ttft_label = value(self.tr("Time to first token"))
        self.prompt_label = value(self.tr("Prompt tokens"))
        self.server_label = value(self.tr("Local API server"))
        self._fields = (self.model_label, self.device_label, self.layers_label, self.vram_process_bar,
                        self.vram_device_bar, self.ram_bar, self.context_bar, self.speed_label, self.prefill_label,
                        self.ttft_label, self.prompt_label, self.server_label)
        for w in self._fields:
            form.addRow(QLabel(), w)
        self._form = form
        self.chart = HistoryChart()
        outer.addWidget(self.chart)
        outer.addStretch(1)

        self.context_length = 0
        self.context_used = 0
        self.prompt_tokens = 0
        self.generated_pieces = 0
        self._t_request = 0.0
        self._t_first = 0.0
        self.live_tok_s = 0.0
        self.last_memory: dict[str, Any] = {}
        self.updates = 0  # number of memory refreshes (tests check the timer works)
        self._info: dict[str, Any] | None = None
        self._server: tuple[str, dict[str, Any] | None] = ("", None)
        self.retranslate()

    def _fix_width(self) -> None:
        """One width from the font and the captions, never from the values.

        Why: a width that follows the text (``12.3 tok/s (live)`` → ``9.8 tok/s (live)``) made the
        splitter move the chat column several times a second while a reply streamed.
        """
        fm = QFontMetrics(self.font())
        captions = max(fm.horizontalAdvance(self._form.labelForField(w).text()) for w in self._fields)
        widest_value = fm.horizontalAdvance("888.88 GiB / 888.88 GiB") + fm.horizontalAdvance("M")
        m = self.layout().contentsMargins()
        width = m.left() + m.right() + captions + max(self._form.horizontalSpacing(), 6) + widest_value + 8
        self.setFixedWidth(max(width, fm.horizontalAdvance("M") * 18))
        self._value_width = widest_value
        if self._info:
            self._show_model_name()

    def _show_model_name(self) -> None:
        """The model's name, shortened in the middle with "…" when longer than the column (full in the tooltip)."""
        name = str((self._info or {}).get("name") or "model")
        fm = QFontMetrics(self.model_label.font())
        self.model_label.setText(fm.elidedText(name, Qt.TextElideMode.ElideMiddle, self._value_width))
        self.model_label.setToolTip(name)

    def retranslate(self) -> None:
        """Captions, accessible names and the texts derived from the last model/memory, via ``tr()``."""
        self.setAccessibleName(self.tr("Live gauges"))
        self.title.setText(self.tr("Performance"))
        for w, caption, name in (
                (self.model_label, self.tr("Model"), self.tr("Model")),
                (self.device_label, self.tr("Device"), self.tr("Device")),
                (self.layers_label, self.tr("Layers"), self.tr("Layers")),
                (self.vram_process_bar, self.tr("VRAM (app)"), self.tr("VRAM used by this app")),
                (self.vram_device_bar, self.tr("VRAM (device)"), self.tr("VRAM used on the device")),
                (self.ram_bar, self.tr("RAM (app)"), self.tr("RAM used by this app")),
                (self.context_bar, self.tr("Context"), self.tr("Context fill")),
                (self.speed_label, self.tr("Speed"), self.tr("Tokens per second")),
                (self.prefill_label, self.tr("Prefill"), self.tr("Prompt processing speed")),
                (self.ttft_label, self.tr("First token"), self.tr("Time to first token")),
                (self.prompt_label, self.tr("Prompt"), self.tr("Prompt tokens")),
                (self.server_label, self.tr("API server"), self.tr("Local API server"))):
            self._form.labelForField(w).setText(caption)
            w.setAccessibleName(name)
        self.chart.setAccessibleName(self.tr("Speed and memory of the last generations"))
        self.chart.update()
        if self._info is None:
            self.model_label.setText(self.tr("No model loaded"))
            self.model_label.setToolTip("")
        else:
            plan = self._info.get("plan") or {}
            if plan:
                self._set_layers(int(plan.get("layers_on_gpu", 0)), int(plan.get("layers_on_cpu", 0)))
        if self.last_memory and self.last_memory.get("remote"):
            self.update_memory(self.last_memory)
        elif self.last_memory and not self.last_memory.get("device_total_bytes"):
            for b in (self.vram_process_bar, self.vram_device_bar):
                b.setFormat(self.tr("no GPU in use"))
        self.set_server(*self._server)
        self._fix_width()  # the captions' width changes with the language

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        elif event.type() == QEvent.Type.FontChange:
            self._fix_width()
        super().changeEvent(event)

    # -- local API server ----------------------------------------------------------------------
    def set_server(self, url: str, stats: dict[str, Any] | None) -> None:
        """Requests served and the last request's tokens/s of the app's local API server ("off" when stopped)."""
        self._server = (url, stats)
        if not url or stats is None:
            self.server_label.setText(self.tr("off"))
            self.server_label.setToolTip("")
            return
        text = self.tr("%1 requests · %2 tok/s").replace("%1", str(stats.get("requests_served", 0))) \
            .replace("%2", f"{float(stats.get('tokens_per_s') or 0.0):.1f}")
        if stats.get("active"):
            text += " · " + self.tr("busy")
        self.server_label.setText(text)
        self.server_label.setToolTip(url)

    # -- model -------------------------------------------------------------------------------
    def set_model(self, info: dict[str, Any] | None) -> None:
        self._info = info or None
        if not info:
            self.model_label.setText(self.tr("No model loaded"))
            self.model_label.setToolTip("")
            self.device_label.setText("–")
            self.layers_label.setText("–")
            self.context_length = 0
            self._set_context(0)
            return
        self._show_model_name()
        backend = info.get("backend") or ""
        self.device_label.setText(f"{info.get('device', '?')}" + (f" · {backend}" if backend else ""))
        self.context_length = int(info.get("context_length") or 0)
        plan = info.get("plan") or {}
        self._offload_mode = str(plan.get("offload_mode") or "")
        if plan:
            self._set_layers(int(plan.get("layers_on_gpu", 0)), int(plan.get("layers_on_cpu", 0)))
        self._set_context(0)

    def _set_layers(self, gpu: int, cpu: int) -> None:
        """Layers per device plus, when layers are offloaded, how the plan runs them."""
        self.layers_label.setText(placement_text({"layers_on_gpu": gpu, "layers_on_cpu": cpu,
                                                  "offload_mode": getattr(self, "_offload_mode", "")}))

    # -- memory ------------------------------------------------------------------------------
    def update_memory(self, m: dict[str, Any]) -> None:
        self.last_memory = m
        self.updates += 1
        if m.get("remote"):  # a remote backend: its memory is on the other machine and it does not report it
            for b in (self.vram_process_bar, self.vram_device_bar, self.ram_bar):
                b.setValue(0)
                b.setFormat(self.tr("remote: not reported"))
                b.setToolTip(self.tr("The model runs on the remote server; its memory is the remote's and "
                                     "OpenAI-compatible servers do not report it."))
            return
        for b in (self.vram_process_bar, self.vram_device_bar, self.ram_bar):
            b.setToolTip("")
        total = m.get("device_total_bytes")
        if total:
            proc = m.get("device_reserved_bytes") or m.get("device_allocated_bytes") or 0
            self._fill(self.vram_process_bar, proc, total)
            self._fill(self.vram_device_bar, m.get("device_used_bytes") or 0, total)
        else:
            for b in (self.vram_process_bar, self.vram_device_bar):
                b.setValue(0)
                b.setFormat(self.tr("no GPU in use"))
        self._fill(self.ram_bar, m.get("ram_process_bytes") or 0, m.get("ram_total_bytes") or 0)
        if m.get("context_length") and int(m["context_length"]) != self.context_length:
            self.context_length = int(m["context_length"])
            self._set_context(self.context_used)
        if "layers_on_gpu" in m:
            self._set_layers(int(m.get("layers_on_gpu") or 0), int(m.get("layers_on_cpu") or 0))
        # no fill from the engine's cache here: it holds the last prompt of whichever chat ran,
        # not the chat on screen (see show_conversation_context)

    @staticmethod
    def _fill(b: QProgressBar, used: int, total: int) -> None:
        if not total:
            b.setValue(0)
            b.setFormat(format_bytes(used))
            return
        b.setValue(int(1000 * min(used / total, 1.0)))
        b.setFormat(f"{format_bytes(used)} / {format_bytes(total)}")

    def show_conversation_context(self, used: int) -> None:
        """The fill of the chat on screen: 0 for a new chat, its last prompt + reply for an old one."""
        if not self._t_request:
            self._set_context(used)

    def _set_context(self, used: int) -> None:
        self.context_used = used
        ctx = self.context_length
        if not ctx:
            self.context_bar.setValue(0)
            self.context_bar.setFormat("–")
            return
        self.context_bar.setValue(int(1000 * min(used / ctx, 1.0)))
        self.context_bar.setFormat(f"{used} / {ctx} ({100 * used / ctx:.0f}%)")

    # -- generation --------------------------------------------------------------------------
    def generation_started(self, started_at: float | None = None) -> None:
        """``started_at``: ``time.perf_counter()`` at Send, the origin the engine uses as well."""
        self._t_request = started_at or time.perf_counter()
        self._t_first = 0.0
        self.generated_pieces = 0
        self.live_tok_s = 0.0
        self.speed_label.setText(self.tr("waiting for first token…"))
        self.prefill_label.setText("…")
        self.ttft_label.setText("…")

    def set_prompt_tokens(self, n: int) -> None:
        self.prompt_tokens = n
        self.prompt_label.setText(str(n))
        self._set_context(n)

    def pieces_received(self, count: int) -> None:
        now = time.perf_counter()
        if not self._t_first:
            self._t_first = now
            self.ttft_label.setText(format_seconds(now - self._t_request))
        self.generated_pieces += count
        elapsed = now - self._t_first
        if elapsed > 0.05 and self.generated_pieces > 1:
            self.live_tok_s = (self.generated_pieces - 1) / elapsed
            self.speed_label.setText(self.tr("%1 tok/s (live)").replace("%1", f"{self.live_tok_s:.1f}"))
        self._set_context(self.prompt_tokens + self.generated_pieces)

    def generation_done(self, stats: dict[str, Any]) -> None:
        self._t_request = 0.0
        decode = float(stats.get("decode_tok_s") or 0.0)
        ttft = float(stats.get("ttft_s") or 0.0)  # wall time from Send (engine figure; see GenerationStats)
        prefill = float(stats.get("prefill_tok_s") or 0.0)
        self.speed_label.setText(self.tr("%1 tok/s").replace("%1", f"{decode:.1f}"))
        if not prefill and stats.get("reused_prompt_tokens"):  # nothing to prefill: not a speed of 0
            self.prefill_label.setText(self.tr("prompt already in the cache"))
        else:
            self.prefill_label.setText(self.tr("%1 tok/s").replace("%1", f"{prefill:.0f}"))
        self.ttft_label.setText(format_seconds(ttft))
        prompt = int(stats.get("prompt_tokens") or self.prompt_tokens)
        self.prompt_label.setText(str(prompt))
        if stats.get("context_length"):
            self.context_length = int(stats["context_length"])
        self._set_context(prompt + int(stats.get("generated_tokens") or 0))
        self.chart.add(decode, int(stats.get("peak_memory_bytes") or 0))

    def generation_failed(self) -> None:
        self._t_request = 0.0
        self.speed_label.setText("–")
        self.prefill_label.setText("–")


def offload_mode_text(mode: str) -> str:
    """The planner's offload mode in words ("" when nothing is offloaded)."""
    if mode == "stream":
        return QCoreApplication.translate("GaugePanel", "offloaded layers streamed to the GPU")
    if mode == "mapped":
        return QCoreApplication.translate("GaugePanel", "offloaded layers read by the GPU from host memory")
    if mode == "cpu":
        return QCoreApplication.translate("GaugePanel", "offloaded layers computed on the CPU")
    return ""


def placement_text(plan: dict[str, Any]) -> str:
    """"N on GPU, M on CPU" and, if the plan offloads, which offload mode it chose."""
    gpu, cpu = int(plan.get("layers_on_gpu") or 0), int(plan.get("layers_on_cpu") or 0)
    text = QCoreApplication.translate("GaugePanel", "%1 on GPU, %2 on CPU").replace("%1", str(gpu)).replace("%2", str(cpu))
    mode = offload_mode_text(str(plan.get("offload_mode") or ""))
    if cpu and mode:  # also with 0 on the GPU: mapped layers still run there
        text += f" ({mode})"
    return text
