<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN">
    <context>
        <name />
        <message>
            <source>Cancelled.</source>
            <translation>已取消。</translation>
        </message>
        <message>
            <source>No model is loaded. Choose a model first.</source>
            <translation>未加载模型。请先选择一个模型。</translation>
        </message>
        <message>
            <source>The engine stopped without finishing the reply.</source>
            <translation>引擎在回复完成前停止了。</translation>
        </message>
        <message>
            <source>The computer ran out of memory. Choose a smaller context length in Settings → Hardware, or close other programs.</source>
            <translation>计算机内存不足。请在“设置 → 硬件”中选择更小的上下文长度，或关闭其他程序。</translation>
        </message>
        <message>
            <source>The GPU ran out of memory. Choose a smaller context length or a VRAM cap in Settings → Hardware, or close other programs that use the GPU.</source>
            <translation>GPU 显存不足。请在“设置 → 硬件”中选择更小的上下文长度或设置显存上限，或关闭其他使用 GPU 的程序。</translation>
        </message>
        <message>
            <source>The conversation is %1 tokens long but the context holds %2. Start a new chat, or choose a larger context length in Settings → Hardware.</source>
            <translation>对话长度为 %1 个词元，但上下文只能容纳 %2 个。请开始新对话，或在“设置 → 硬件”中选择更大的上下文长度。</translation>
        </message>
        <message>
            <source>The file is damaged or is not a model file this app can read (%1).</source>
            <translation>该文件已损坏，或不是本应用能读取的模型文件（%1）。</translation>
        </message>
        <message>
            <source>This kind of model is not supported (%1).</source>
            <translation>不支持此类模型（%1）。</translation>
        </message>
        <message>
            <source>%1: file not found.</source>
            <translation>%1：找不到文件。</translation>
        </message>
        <message>
            <source>%1: permission denied (the file cannot be read).</source>
            <translation>%1：权限不足（无法读取该文件）。</translation>
        </message>
        <message>
            <source>%1 is a folder, not a file.</source>
            <translation>%1 是文件夹，不是文件。</translation>
        </message>
        <message>
            <source>%1 cannot be read (%2).</source>
            <translation>无法读取 %1（%2）。</translation>
        </message>
        <message>
            <source>Something unexpected went wrong (%1). The log file has the details.</source>
            <translation>发生了意外错误（%1）。详细信息见日志文件。</translation>
        </message>
    </context>
    <context>
        <name>AttachmentsBar</name>
        <message>
            <source>Answers from:</source>
            <translation>回答依据：</translation>
        </message>
        <message>
            <source>No documents attached</source>
            <translation>未附加文档</translation>
        </message>
        <message>
            <source>Knowledge bases…</source>
            <translation>知识库…</translation>
        </message>
        <message>
            <source>Choose the knowledge bases this chat answers from</source>
            <translation>选择此对话用于回答的知识库</translation>
        </message>
        <message>
            <source>Cancel</source>
            <translation>取消</translation>
        </message>
        <message>
            <source>Cancel indexing</source>
            <translation>取消建立索引</translation>
        </message>
        <message>
            <source>Indexing progress</source>
            <translation>索引进度</translation>
        </message>
    </context>
    <context>
        <name>ChatKnowledge</name>
        <message>
            <source>%1 files indexed</source>
            <translation>已索引 %1 个文件</translation>
        </message>
        <message>
            <source>Knowledge base %1</source>
            <translation>知识库 %1</translation>
        </message>
        <message>
            <source>Documents cannot be attached in this session: %1</source>
            <translation>本次运行无法附加文档：%1</translation>
        </message>
        <message>
            <source>the knowledge store is not available</source>
            <translation>知识库存储不可用</translation>
        </message>
        <message>
            <source>Indexing the attached documents…</source>
            <translation>正在为附加的文档建立索引…</translation>
        </message>
        <message>
            <source>Computing search vectors (%1 of %2 passages)…</source>
            <translation>正在计算检索向量（%1 / %2 个段落）…</translation>
        </message>
        <message>
            <source>Indexing %1 (%2 of %3 files, %4 passages)…</source>
            <translation>正在索引 %1（%2 / %3 个文件，%4 个段落）…</translation>
        </message>
        <message>
            <source>Indexing was cancelled: the files indexed before it stay attached and are searched; the others are not.</source>
            <translation>已取消建立索引：此前已索引的文件仍然附加并可检索，其余文件不会被检索。</translation>
        </message>
        <message>
            <source>Some files could not be indexed (the others were):</source>
            <translation>部分文件无法索引（其余文件已索引）：</translation>
        </message>
        <message>
            <source>Attached: %1 passages indexed. Ask a question about the documents.</source>
            <translation>已附加：索引了 %1 个段落。可以就这些文档提问了。</translation>
        </message>
        <message>
            <source>Indexing failed: %1</source>
            <translation>建立索引失败：%1</translation>
        </message>
        <message>
            <source>The %1 oldest messages of the conversation were left out so that a source fits.</source>
            <translation>为了放下来源段落，对话中最早的 %1 条消息被省略了。</translation>
        </message>
        <message>
            <source>No source passage fits in the %1-token context beside the question and a %2-token answer; the model answers without sources.</source>
            <translation>在 %1 个词元的上下文中，除问题和 %2 个词元的回答外放不下任何来源段落；模型将在没有来源的情况下回答。</translation>
        </message>
        <message>
            <source>%1 of %2 passages did not fit in the %3-token context and were left out.</source>
            <translation>%2 个段落中有 %1 个放不进 %3 个词元的上下文，未被采用。</translation>
        </message>
        <message>
            <source>The question and conversation alone take %1 tokens, more than the %2 left beside a %3-token answer.</source>
            <translation>仅问题和对话就占用 %1 个词元，超过了为 %3 个词元的回答预留空间后剩下的 %2 个词元。</translation>
        </message>
    </context>
    <context>
        <name>ChatView</name>
        <message>
            <source>Conversation</source>
            <translation>对话</translation>
        </message>
    </context>
    <context>
        <name>Chip</name>
        <message>
            <source>Stop using the knowledge base %1 in this chat</source>
            <translation>此对话不再使用知识库 %1</translation>
        </message>
        <message>
            <source>Remove %1 from this chat</source>
            <translation>从此对话移除 %1</translation>
        </message>
    </context>
    <context>
        <name>ChooseBasesDialog</name>
        <message>
            <source>Knowledge bases for this chat</source>
            <translation>此对话使用的知识库</translation>
        </message>
        <message>
            <source>Choose knowledge bases for this chat</source>
            <translation>为此对话选择知识库</translation>
        </message>
        <message>
            <source>Questions in this chat are answered from the ticked knowledge bases, with citations. Files attached to the chat are always used.</source>
            <translation>此对话中的问题将根据勾选的知识库回答，并附上引用。附加到对话的文件始终会被使用。</translation>
        </message>
        <message>
            <source>Knowledge bases to use</source>
            <translation>要使用的知识库</translation>
        </message>
        <message>
            <source>%1 (%2 files, %3 passages)</source>
            <translation>%1（%2 个文件，%3 个段落）</translation>
        </message>
        <message>
            <source>No knowledge bases yet. Create one in Knowledge bases…</source>
            <translation>还没有知识库。请在“知识库…”中创建。</translation>
        </message>
    </context>
    <context>
        <name>ConvertDialog</name>
        <message>
            <source>Convert to .ternary</source>
            <translation>转换为 .ternary</translation>
        </message>
        <message>
            <source>Convert a model</source>
            <translation>转换模型</translation>
        </message>
        <message>
            <source>Model to convert</source>
            <translation>要转换的模型</translation>
        </message>
        <message>
            <source>File…</source>
            <translation>文件…</translation>
        </message>
        <message>
            <source>Choose a .gguf file</source>
            <translation>选择 .gguf 文件</translation>
        </message>
        <message>
            <source>Folder…</source>
            <translation>文件夹…</translation>
        </message>
        <message>
            <source>Choose a Hugging Face folder</source>
            <translation>选择 Hugging Face 文件夹</translation>
        </message>
        <message>
            <source>Source</source>
            <translation>来源</translation>
        </message>
        <message>
            <source>Output .ternary file</source>
            <translation>输出的 .ternary 文件</translation>
        </message>
        <message>
            <source>Output</source>
            <translation>输出</translation>
        </message>
        <message>
            <source>Conversion progress</source>
            <translation>转换进度</translation>
        </message>
        <message>
            <source>Conversion status</source>
            <translation>转换状态</translation>
        </message>
        <message>
            <source>Convert</source>
            <translation>转换</translation>
        </message>
        <message>
            <source>Start converting</source>
            <translation>开始转换</translation>
        </message>
        <message>
            <source>Choose a model file</source>
            <translation>选择模型文件</translation>
        </message>
        <message>
            <source>GGUF models (*.gguf)</source>
            <translation>GGUF 模型 (*.gguf)</translation>
        </message>
        <message>
            <source>Choose an existing .gguf file or Hugging Face folder.</source>
            <translation>请选择已存在的 .gguf 文件或 Hugging Face 文件夹。</translation>
        </message>
        <message>
            <source>The output must be a file name ending in .ternary.</source>
            <translation>输出必须是以 .ternary 结尾的文件名。</translation>
        </message>
        <message>
            <source>Starting…</source>
            <translation>正在开始…</translation>
        </message>
        <message>
            <source>Checking the source (sha256)</source>
            <translation>正在校验源文件（sha256）</translation>
        </message>
        <message>
            <source>Converting</source>
            <translation>正在转换</translation>
        </message>
        <message>
            <source>Done: %1 (%2, %3 tensors, %4 s). Weights unchanged (max error %5).</source>
            <translation>完成：%1（%2，%3 个张量，%4 秒）。权重未改变（最大误差 %5）。</translation>
        </message>
        <message>
            <source>Close</source>
            <translation>关闭</translation>
        </message>
        <message>
            <source>Conversion failed: %1</source>
            <translation>转换失败：%1</translation>
        </message>
        <message>
            <source>Conversion cancelled; no output file was left behind.</source>
            <translation>转换已取消；未留下任何输出文件。</translation>
        </message>
        <message>
            <source>Cancelling…</source>
            <translation>正在取消…</translation>
        </message>
    </context>
    <context>
        <name>DocumentErrors</name>
        <message>
            <source>%1: this file type is not supported. Use .txt, .md, .pdf, .docx or .html.</source>
            <translation>%1：不支持此文件类型。请使用 .txt、.md、.pdf、.docx 或 .html。</translation>
        </message>
        <message>
            <source>%1: file not found.</source>
            <translation>%1：找不到文件。</translation>
        </message>
        <message>
            <source>%1 cannot be read.</source>
            <translation>无法读取 %1。</translation>
        </message>
        <message>
            <source>%1 is too large (%2 MB); the limit is %3 MB. Split it into smaller files.</source>
            <translation>%1 太大（%2 MB），上限为 %3 MB。请拆分为较小的文件。</translation>
        </message>
        <message>
            <source>%1 is not a text file (it contains binary data; was it renamed?).</source>
            <translation>%1 不是文本文件（包含二进制数据，是否被改过扩展名？）。</translation>
        </message>
        <message>
            <source>%1 is password-protected. Save an unprotected copy and drop that.</source>
            <translation>%1 受密码保护。请另存一份未加密的副本再拖入。</translation>
        </message>
        <message>
            <source>%1 looks like a scanned PDF with no text layer; run OCR on it first.</source>
            <translation>%1 似乎是没有文字层的扫描版 PDF，请先进行 OCR 识别。</translation>
        </message>
        <message>
            <source>%1 is damaged or not the kind of file its name says.</source>
            <translation>%1 已损坏，或与其扩展名所示的文件类型不符。</translation>
        </message>
        <message>
            <source>%1 contains no text.</source>
            <translation>%1 不包含任何文本。</translation>
        </message>
        <message>
            <source>%1 is too large when unpacked (more than %3 MB of content); it may be a compression bomb, or split it into smaller files.</source>
            <translation>%1 解压后过大（内容超过 %3 MB）；它可能是压缩炸弹，或请拆分成更小的文件。</translation>
        </message>
        <message>
            <source>%1 is a folder, not a document; drop the files inside it instead.</source>
            <translation>%1 是文件夹，不是文档；请改为拖入其中的文件。</translation>
        </message>
        <message>
            <source>%1 is not a regular file (it is a pipe, socket or device), so it cannot be read as a document.</source>
            <translation>%1 不是普通文件（而是管道、套接字或设备），无法作为文档读取。</translation>
        </message>
    </context>
    <context>
        <name>GaugePanel</name>
        <message>
            <source>Live gauges</source>
            <translation>实时仪表</translation>
        </message>
        <message>
            <source>Performance</source>
            <translation>性能</translation>
        </message>
        <message>
            <source>Model</source>
            <translation>模型</translation>
        </message>
        <message>
            <source>Device</source>
            <translation>设备</translation>
        </message>
        <message>
            <source>Layers</source>
            <translation>层</translation>
        </message>
        <message>
            <source>VRAM used by this app</source>
            <translation>本应用占用的显存</translation>
        </message>
        <message>
            <source>VRAM used on the device</source>
            <translation>整张显卡已用的显存</translation>
        </message>
        <message>
            <source>RAM used by this app</source>
            <translation>本应用占用的内存</translation>
        </message>
        <message>
            <source>Context fill</source>
            <translation>上下文占用</translation>
        </message>
        <message>
            <source>Tokens per second</source>
            <translation>每秒词元数</translation>
        </message>
        <message>
            <source>Prompt processing speed</source>
            <translation>提示词处理速度</translation>
        </message>
        <message>
            <source>Time to first token</source>
            <translation>首词元延迟</translation>
        </message>
        <message>
            <source>Prompt tokens</source>
            <translation>提示词词元数</translation>
        </message>
        <message>
            <source>Local API server</source>
            <translation>本地 API 服务器</translation>
        </message>
        <message>
            <source>VRAM (app)</source>
            <translation>显存（本应用）</translation>
        </message>
        <message>
            <source>VRAM (device)</source>
            <translation>显存（整卡）</translation>
        </message>
        <message>
            <source>RAM (app)</source>
            <translation>内存（本应用）</translation>
        </message>
        <message>
            <source>Context</source>
            <translation>上下文</translation>
        </message>
        <message>
            <source>Speed</source>
            <translation>速度</translation>
        </message>
        <message>
            <source>Prefill</source>
            <translation>预填充</translation>
        </message>
        <message>
            <source>First token</source>
            <translation>首个词元</translation>
        </message>
        <message>
            <source>Prompt</source>
            <translation>提示词</translation>
        </message>
        <message>
            <source>API server</source>
            <translation>API 服务器</translation>
        </message>
        <message>
            <source>Speed and memory of the last generations</source>
            <translation>最近几次生成的速度与内存</translation>
        </message>
        <message>
            <source>No model loaded</source>
            <translation>未加载模型</translation>
        </message>
        <message>
            <source>off</source>
            <translation>关闭</translation>
        </message>
        <message>
            <source>%1 requests · %2 tok/s</source>
            <translation>%1 个请求 · %2 词元/秒</translation>
        </message>
        <message>
            <source>busy</source>
            <translation>忙碌</translation>
        </message>
        <message>
            <source>remote: not reported</source>
            <translation>远程：未报告</translation>
        </message>
        <message>
            <source>The model runs on the remote server; its memory is the remote's and OpenAI-compatible servers do not report it.</source>
            <translation>模型运行在远程服务器上；内存是远程服务器的，OpenAI 兼容服务器不会报告它。</translation>
        </message>
        <message>
            <source>%1 tok/s</source>
            <translation>%1 词元/秒</translation>
        </message>
        <message>
            <source>prompt already in the cache</source>
            <translation>提示词已在缓存中</translation>
        </message>
        <message>
            <source>offloaded layers streamed to the GPU</source>
            <translation>卸载的层流式传输到 GPU</translation>
        </message>
        <message>
            <source>offloaded layers read by the GPU from host memory</source>
            <translation>卸载的层由 GPU 直接从内存读取</translation>
        </message>
        <message>
            <source>offloaded layers computed on the CPU</source>
            <translation>卸载的层在 CPU 上计算</translation>
        </message>
        <message>
            <source>%1 on GPU, %2 on CPU</source>
            <translation>GPU 上 %1 层，CPU 上 %2 层</translation>
        </message>
        <message>
            <source>no GPU in use</source>
            <translation>未使用 GPU</translation>
        </message>
        <message>
            <source>waiting for first token…</source>
            <translation>等待首个词元…</translation>
        </message>
        <message>
            <source>%1 tok/s (live)</source>
            <translation>%1 词元/秒（实时）</translation>
        </message>
    </context>
    <context>
        <name>HistoryChart</name>
        <message>
            <source>Speed and memory of the last generations</source>
            <translation>最近几次生成的速度与内存</translation>
        </message>
        <message>
            <source>Last: %1 tokens/s, peak %2</source>
            <translation>最近一次：%1 词元/秒，峰值 %2</translation>
        </message>
        <message>
            <source>No generations yet</source>
            <translation>暂无生成记录</translation>
        </message>
        <message>
            <source>tok/s (max %1)</source>
            <translation>词元/秒（最高 %1）</translation>
        </message>
        <message>
            <source>peak mem (max %1)</source>
            <translation>峰值内存（最高 %1）</translation>
        </message>
    </context>
    <context>
        <name>IndexRunner</name>
        <message>
            <source>Cancelled before it started.</source>
            <translation>在开始前已取消。</translation>
        </message>
    </context>
    <context>
        <name>KnowledgeBasesDialog</name>
        <message>
            <source>%1 disappeared while it was being indexed.</source>
            <translation>%1 在索引过程中消失了。</translation>
        </message>
        <message>
            <source>%1 added, %2 unchanged, %3 updated, %4 removed · %5 passages · %6 s</source>
            <translation>新增 %1，未变 %2，更新 %3，移除 %4 · %5 个段落 · %6 秒</translation>
        </message>
        <message>
            <source>Could not index %1 of the files; the list says why.</source>
            <translation>有 %1 个文件无法索引；原因见列表。</translation>
        </message>
        <message>
            <source>%1 files in the folders are of types that are not indexed (for example %2).</source>
            <translation>文件夹中有 %1 个文件的类型不会被索引（例如 %2）。</translation>
        </message>
        <message>
            <source>Cancelled; the files indexed so far are kept.</source>
            <translation>已取消；已索引的文件会保留。</translation>
        </message>
        <message>
            <source>Knowledge bases</source>
            <translation>知识库</translation>
        </message>
        <message>
            <source>Search method</source>
            <translation>搜索方式</translation>
        </message>
        <message>
            <source>Name</source>
            <translation>名称</translation>
        </message>
        <message>
            <source>Files</source>
            <translation>文件</translation>
        </message>
        <message>
            <source>Passages</source>
            <translation>段落</translation>
        </message>
        <message>
            <source>Problems</source>
            <translation>问题</translation>
        </message>
        <message>
            <source>Search</source>
            <translation>搜索</translation>
        </message>
        <message>
            <source>Columns</source>
            <translation>列</translation>
        </message>
        <message>
            <source>New…</source>
            <translation>新建…</translation>
        </message>
        <message>
            <source>New knowledge base</source>
            <translation>新建知识库</translation>
        </message>
        <message>
            <source>Rename…</source>
            <translation>重命名…</translation>
        </message>
        <message>
            <source>Rename the knowledge base</source>
            <translation>重命名知识库</translation>
        </message>
        <message>
            <source>Delete</source>
            <translation>删除</translation>
        </message>
        <message>
            <source>Delete the knowledge base (files on disk stay)</source>
            <translation>删除知识库（磁盘上的文件保留）</translation>
        </message>
        <message>
            <source>Selected knowledge base</source>
            <translation>所选知识库</translation>
        </message>
        <message>
            <source>Files and folders of the knowledge base</source>
            <translation>知识库的文件和文件夹</translation>
        </message>
        <message>
            <source>File</source>
            <translation>文件</translation>
        </message>
        <message>
            <source>Status</source>
            <translation>状态</translation>
        </message>
        <message>
            <source>Files that could not be indexed, and why</source>
            <translation>无法索引的文件及原因</translation>
        </message>
        <message>
            <source>Add files…</source>
            <translation>添加文件…</translation>
        </message>
        <message>
            <source>Add files to the knowledge base</source>
            <translation>向知识库添加文件</translation>
        </message>
        <message>
            <source>Add folder…</source>
            <translation>添加文件夹…</translation>
        </message>
        <message>
            <source>Add a folder to the knowledge base</source>
            <translation>向知识库添加文件夹</translation>
        </message>
        <message>
            <source>Remove</source>
            <translation>移除</translation>
        </message>
        <message>
            <source>Remove the selected file or folder from the knowledge base</source>
            <translation>从知识库中移除所选文件或文件夹</translation>
        </message>
        <message>
            <source>Removes it and its passages from the index; the file on disk stays.</source>
            <translation>从索引中移除它及其段落；磁盘上的文件保留。</translation>
        </message>
        <message>
            <source>Exclude</source>
            <translation>排除</translation>
        </message>
        <message>
            <source>Exclude the selected file of a folder from the knowledge base</source>
            <translation>将所选的文件夹内文件排除出知识库</translation>
        </message>
        <message>
            <source>Leaves this file of the folder out of the index (its passages are removed) until you include it again; the file on disk stays.</source>
            <translation>将文件夹中的这个文件排除在索引之外（移除其段落），直到你重新包含它；磁盘上的文件保留。</translation>
        </message>
        <message>
            <source>Re-index</source>
            <translation>重新索引</translation>
        </message>
        <message>
            <source>Re-index the knowledge base (only what changed)</source>
            <translation>重新索引知识库（只处理有变化的部分）</translation>
        </message>
        <message>
            <source>Last indexing result</source>
            <translation>上次索引结果</translation>
        </message>
        <message>
            <source>Indexing status</source>
            <translation>索引状态</translation>
        </message>
        <message>
            <source>Indexing progress</source>
            <translation>索引进度</translation>
        </message>
        <message>
            <source>Cancel indexing</source>
            <translation>取消建立索引</translation>
        </message>
        <message>
            <source>Cancel indexing (the files done are kept)</source>
            <translation>取消索引（已完成的文件会保留）</translation>
        </message>
        <message>
            <source>Message</source>
            <translation>提示</translation>
        </message>
        <message>
            <source>Passages are found by their words (full-text search) and by meaning with the embedding model %1.</source>
            <translation>通过关键词（全文搜索）以及嵌入模型 %1 的语义来查找段落。</translation>
        </message>
        <message>
            <source>Full-text search only — install Qwen3-Embedding-0.6B from Models… for better matches.</source>
            <translation>仅全文搜索——在“模型…”中安装 Qwen3-Embedding-0.6B 可获得更好的匹配。</translation>
        </message>
        <message>
            <source>Words + meaning (%1)</source>
            <translation>关键词 + 语义（%1）</translation>
        </message>
        <message>
            <source>Words</source>
            <translation>关键词</translation>
        </message>
        <message>
            <source>indexed</source>
            <translation>已索引</translation>
        </message>
        <message>
            <source>not indexed (see why below)</source>
            <translation>未索引（原因见下方）</translation>
        </message>
        <message>
            <source>pending</source>
            <translation>待索引</translation>
        </message>
        <message>
            <source>No knowledge base yet: press New… to create one.</source>
            <translation>还没有知识库：点击“新建…”创建一个。</translation>
        </message>
        <message>
            <source>%1: %2 files, %3 passages.</source>
            <translation>%1：%2 个文件，%3 个段落。</translation>
        </message>
        <message>
            <source>Vectors from %1.</source>
            <translation>向量来自 %1。</translation>
        </message>
        <message>
            <source>No vectors: found by words only.</source>
            <translation>无向量：仅按关键词查找。</translation>
        </message>
        <message>
            <source>%1 files wait to be indexed.</source>
            <translation>%1 个文件等待索引。</translation>
        </message>
        <message>
            <source>excluded</source>
            <translation>已排除</translation>
        </message>
        <message>
            <source>Left out of the index by you; “Include again” indexes it.</source>
            <translation>已被你排除在索引之外；“重新包含”会再次索引它。</translation>
        </message>
        <message>
            <source>folder: %1 files, %2 with problems</source>
            <translation>文件夹：%1 个文件，%2 个有问题</translation>
        </message>
        <message>
            <source>Include again</source>
            <translation>重新包含</translation>
        </message>
        <message>
            <source>Include the selected file in the knowledge base again</source>
            <translation>将所选文件重新包含到知识库中</translation>
        </message>
        <message>
            <source>A knowledge base named “%1” already exists.</source>
            <translation>名为“%1”的知识库已存在。</translation>
        </message>
        <message>
            <source>A knowledge base needs a name.</source>
            <translation>知识库需要一个名称。</translation>
        </message>
        <message>
            <source>A knowledge base name can be at most 200 characters.</source>
            <translation>知识库名称最多 200 个字符。</translation>
        </message>
        <message>
            <source>Name:</source>
            <translation>名称：</translation>
        </message>
        <message>
            <source>Created “%1”. Add files or a folder to it.</source>
            <translation>已创建“%1”。请向其中添加文件或文件夹。</translation>
        </message>
        <message>
            <source>Rename knowledge base</source>
            <translation>重命名知识库</translation>
        </message>
        <message>
            <source>New name:</source>
            <translation>新名称：</translation>
        </message>
        <message>
            <source>Renamed “%1” to “%2”.</source>
            <translation>已将“%1”重命名为“%2”。</translation>
        </message>
        <message>
            <source>Delete knowledge base</source>
            <translation>删除知识库</translation>
        </message>
        <message>
            <source>Delete the knowledge base “%1” and its index? The files on disk are not touched.</source>
            <translation>删除知识库“%1”及其索引？磁盘上的文件不会受影响。</translation>
        </message>
        <message>
            <source>Deleted “%1”; its files on disk are unchanged.</source>
            <translation>已删除“%1”；磁盘上的文件未改变。</translation>
        </message>
        <message>
            <source>Add files</source>
            <translation>添加文件</translation>
        </message>
        <message>
            <source>Documents and source code (*.txt *.md *.pdf *.docx *.html *.htm *.py *.c *.h *.cpp *.js *.ts *.java *.go *.rs *.rb *.sh *.toml *.yaml *.yml *.json *.css);;All files (*)</source>
            <translation>文档和源代码 (*.txt *.md *.pdf *.docx *.html *.htm *.py *.c *.h *.cpp *.js *.ts *.java *.go *.rs *.rb *.sh *.toml *.yaml *.yml *.json *.css);;所有文件 (*)</translation>
        </message>
        <message>
            <source>Add a folder</source>
            <translation>添加文件夹</translation>
        </message>
        <message>
            <source>Removed %1 from the index; the file on disk is unchanged.</source>
            <translation>已从索引中移除 %1；磁盘上的文件未改变。</translation>
        </message>
        <message>
            <source>Only a file inside an added folder can be excluded; an added file is removed with Remove.</source>
            <translation>只能排除已添加文件夹中的文件；单独添加的文件请用“移除”。</translation>
        </message>
        <message>
            <source>Excluded %1: its passages were removed from the index; the file on disk is unchanged.</source>
            <translation>已排除 %1：其段落已从索引中移除；磁盘上的文件未改变。</translation>
        </message>
        <message>
            <source>%1 is included again and is being indexed.</source>
            <translation>%1 已重新包含，正在索引。</translation>
        </message>
        <message>
            <source>Cancelling after the current file…</source>
            <translation>当前文件完成后取消…</translation>
        </message>
        <message>
            <source>the chat's attachments</source>
            <translation>对话的附件</translation>
        </message>
        <message>
            <source>Indexing “%1”…</source>
            <translation>正在索引“%1”…</translation>
        </message>
        <message>
            <source>“%1”: computing search vectors, %2 of %3 passages</source>
            <translation>“%1”：正在计算搜索向量，%2 / %3 个段落</translation>
        </message>
        <message>
            <source>Indexing “%1”: %2 of %3 files, %4 passages</source>
            <translation>正在索引“%1”：第 %2 / %3 个文件，%4 个段落</translation>
        </message>
        <message>
            <source>“%1” indexed.</source>
            <translation>“%1”已索引。</translation>
        </message>
        <message>
            <source>Indexing “%1” was cancelled.</source>
            <translation>“%1”的索引已取消。</translation>
        </message>
        <message>
            <source>Indexing “%1” failed: %2</source>
            <translation>索引“%1”失败：%2</translation>
        </message>
        <message>
            <source>No knowledge bases yet</source>
            <translation>还没有知识库</translation>
        </message>
    </context>
    <context>
        <name>MainWindow</name>
        <message>
            <source>Ternary Chat</source>
            <translation>Ternary Chat 三值聊天</translation>
        </message>
        <message>
            <source>New chat</source>
            <translation>新对话</translation>
        </message>
        <message>
            <source>Start a new conversation (Ctrl+N)</source>
            <translation>开始新对话（Ctrl+N）</translation>
        </message>
        <message>
            <source>Search conversations (Ctrl+F)</source>
            <translation>搜索对话（Ctrl+F）</translation>
        </message>
        <message>
            <source>Search conversations</source>
            <translation>搜索对话</translation>
        </message>
        <message>
            <source>Conversations</source>
            <translation>对话列表</translation>
        </message>
        <message>
            <source>Model:</source>
            <translation>模型：</translation>
        </message>
        <message>
            <source>Model picker</source>
            <translation>模型选择器</translation>
        </message>
        <message>
            <source>Models…</source>
            <translation>模型…</translation>
        </message>
        <message>
            <source>Open the model manager</source>
            <translation>打开模型管理器</translation>
        </message>
        <message>
            <source>Settings…</source>
            <translation>设置…</translation>
        </message>
        <message>
            <source>Open settings</source>
            <translation>打开设置</translation>
        </message>
        <message>
            <source>Settings (Ctrl+,)</source>
            <translation>设置（Ctrl+,）</translation>
        </message>
        <message>
            <source>Message</source>
            <translation>提示</translation>
        </message>
        <message>
            <source>Dismiss message</source>
            <translation>关闭提示</translation>
        </message>
        <message>
            <source>Attach…</source>
            <translation>附加…</translation>
        </message>
        <message>
            <source>Message input</source>
            <translation>消息输入框</translation>
        </message>
        <message>
            <source>Type a message. Enter sends, Shift+Enter adds a new line.</source>
            <translation>输入消息。Enter 发送，Shift+Enter 换行。</translation>
        </message>
        <message>
            <source>Send</source>
            <translation>发送</translation>
        </message>
        <message>
            <source>Send message</source>
            <translation>发送消息</translation>
        </message>
        <message>
            <source>No model loaded</source>
            <translation>未加载模型</translation>
        </message>
        <message>
            <source>Status</source>
            <translation>状态</translation>
        </message>
        <message>
            <source>Attach documents to ask about, or summarize one</source>
            <translation>附加文档以便提问，或为一个文档生成摘要</translation>
        </message>
        <message>
            <source>Ask questions about documents (.txt, .md, .pdf, .docx, .html, source code) or summarize one; you can also drop files here</source>
            <translation>就文档（.txt、.md、.pdf、.docx、.html、源代码）提问或为一个文档生成摘要；也可以把文件拖放到这里</translation>
        </message>
        <message>
            <source>Ask questions about documents (attach to this chat)…</source>
            <translation>就文档提问（附加到此对话）…</translation>
        </message>
        <message>
            <source>Ask questions about a folder (attach to this chat)…</source>
            <translation>就文件夹提问（附加到此对话）…</translation>
        </message>
        <message>
            <source>Summarize a document…</source>
            <translation>为文档生成摘要…</translation>
        </message>
        <message>
            <source>&amp;Documents</source>
            <translation>文档(&amp;D)</translation>
        </message>
        <message>
            <source>Knowledge bases…</source>
            <translation>知识库…</translation>
        </message>
        <message>
            <source>Create and update knowledge bases (Ctrl+K)</source>
            <translation>创建和更新知识库 (Ctrl+K)</translation>
        </message>
        <message>
            <source>Model loading progress</source>
            <translation>模型加载进度</translation>
        </message>
        <message>
            <source>Search</source>
            <translation>搜索</translation>
        </message>
        <message>
            <source>Settings</source>
            <translation>设置</translation>
        </message>
        <message>
            <source>Stop</source>
            <translation>停止</translation>
        </message>
        <message>
            <source>Models</source>
            <translation>模型</translation>
        </message>
        <message>
            <source>Quit</source>
            <translation>退出</translation>
        </message>
        <message>
            <source>&amp;View</source>
            <translation>视图(&amp;V)</translation>
        </message>
        <message>
            <source>Show performance panel</source>
            <translation>显示性能面板</translation>
        </message>
        <message>
            <source>Show or hide the Performance panel (Ctrl+Shift+P)</source>
            <translation>显示或隐藏性能面板（Ctrl+Shift+P）</translation>
        </message>
        <message>
            <source>Stop generating</source>
            <translation>停止生成</translation>
        </message>
        <message>
            <source>Rename conversation</source>
            <translation>重命名对话</translation>
        </message>
        <message>
            <source>Title:</source>
            <translation>标题：</translation>
        </message>
        <message>
            <source>A conversation title cannot be empty.</source>
            <translation>对话标题不能为空。</translation>
        </message>
        <message>
            <source>Delete conversation</source>
            <translation>删除对话</translation>
        </message>
        <message>
            <source>Delete this conversation? This cannot be undone.</source>
            <translation>删除此对话？此操作无法撤销。</translation>
        </message>
        <message>
            <source>Export conversation</source>
            <translation>导出对话</translation>
        </message>
        <message>
            <source>Markdown (*.md)</source>
            <translation>Markdown (*.md)</translation>
        </message>
        <message>
            <source>JSON (*.json)</source>
            <translation>JSON (*.json)</translation>
        </message>
        <message>
            <source>Could not export: %1</source>
            <translation>无法导出：%1</translation>
        </message>
        <message>
            <source>Exported to %1</source>
            <translation>已导出到 %1</translation>
        </message>
        <message>
            <source>Rename…</source>
            <translation>重命名…</translation>
        </message>
        <message>
            <source>Export as Markdown…</source>
            <translation>导出为 Markdown…</translation>
        </message>
        <message>
            <source>Export as JSON…</source>
            <translation>导出为 JSON…</translation>
        </message>
        <message>
            <source>Delete…</source>
            <translation>删除…</translation>
        </message>
        <message>
            <source>(imported)</source>
            <translation>（已导入）</translation>
        </message>
        <message>
            <source>(remote: %1)</source>
            <translation>（远程：%1）</translation>
        </message>
        <message>
            <source>Could not list the models of the remote %1: %2</source>
            <translation>无法列出远程 %1 的模型：%2</translation>
        </message>
        <message>
            <source>The local server did not start: %1</source>
            <translation>本地服务器未能启动：%1</translation>
        </message>
        <message>
            <source>Local API server at %1</source>
            <translation>本地 API 服务器位于 %1</translation>
        </message>
        <message>
            <source>Waiting for an API request to finish…</source>
            <translation>正在等待一个 API 请求完成…</translation>
        </message>
        <message>
            <source>waiting for an API request to finish…</source>
            <translation>正在等待一个 API 请求完成…</translation>
        </message>
        <message>
            <source>Generating…</source>
            <translation>正在生成…</translation>
        </message>
        <message>
            <source>No models yet — open Models… to download or import one</source>
            <translation>还没有模型 — 打开“模型…”下载或导入</translation>
        </message>
        <message>
            <source>Loading %1…</source>
            <translation>正在加载 %1…</translation>
        </message>
        <message>
            <source>Loading: %1</source>
            <translation>加载中：%1</translation>
        </message>
        <message>
            <source>%1 on the remote %2 (%3)</source>
            <translation>%1，位于远程 %2（%3）</translation>
        </message>
        <message>
            <source>%1 on %2 · context %3 tokens</source>
            <translation>%1 运行于 %2 · 上下文 %3 个词元</translation>
        </message>
        <message>
            <source>%1 was not summarized.</source>
            <translation>%1 未被总结。</translation>
        </message>
        <message>
            <source>Could not load the model: %1</source>
            <translation>无法加载模型：%1</translation>
        </message>
        <message>
            <source>%1 is not a model: use a .gguf or .ternary file or a Hugging Face folder.</source>
            <translation>%1 不是模型：请使用 .gguf 或 .ternary 文件，或 Hugging Face 模型文件夹。</translation>
        </message>
        <message>
            <source>The folder %1 has no config.json, so it is not a Hugging Face model folder.</source>
            <translation>文件夹 %1 中没有 config.json，因此不是 Hugging Face 模型文件夹。</translation>
        </message>
        <message>
            <source>Checking %1…</source>
            <translation>正在检查 %1…</translation>
        </message>
        <message>
            <source>%1 was not imported: %2</source>
            <translation>%1 未导入：%2</translation>
        </message>
        <message>
            <source>The model in use stays loaded.</source>
            <translation>当前使用的模型保持加载。</translation>
        </message>
        <message>
            <source>Load a model first (Models… or the model picker).</source>
            <translation>请先加载模型（“模型…”或模型选择器）。</translation>
        </message>
        <message>
            <source>generating…</source>
            <translation>生成中…</translation>
        </message>
        <message>
            <source>searching the documents…</source>
            <translation>正在检索文档…</translation>
        </message>
        <message>
            <source>Still indexing: this answer uses the documents indexed so far.</source>
            <translation>仍在建立索引：此回答只使用目前已索引的文档。</translation>
        </message>
        <message>
            <source>Stopping…</source>
            <translation>正在停止…</translation>
        </message>
        <message>
            <source>Ask questions about it (attach to this chat)</source>
            <translation>就它提问（附加到此对话）</translation>
        </message>
        <message>
            <source>Ask questions about them (attach to this chat)</source>
            <translation>就它们提问（附加到此对话）</translation>
        </message>
        <message>
            <source>Summarize it</source>
            <translation>生成摘要</translation>
        </message>
        <message>
            <source>%1: drop a document (.txt, .md, .pdf, .docx, .html, source code) or a folder to ask questions about it or summarize it, or a model (.gguf, .ternary, folder) to import it.</source>
            <translation>%1：拖放文档（.txt、.md、.pdf、.docx、.html、源代码）或文件夹可就其提问或生成摘要，拖放模型（.gguf、.ternary、文件夹）可导入。</translation>
        </message>
        <message>
            <source>Ready</source>
            <translation>就绪</translation>
        </message>
        <message>
            <source>%1 does not report its context length; questions about documents and summaries need it to fit the text. Serve the model with Ternary Chat, vLLM or llama-server, or use a local model.</source>
            <translation>%1 未报告其上下文长度；文档问答和摘要需要它来安排文本。请用 Ternary Chat、vLLM 或 llama-server 提供该模型，或使用本地模型。</translation>
        </message>
        <message>
            <source>%1 cannot count tokens; passages are fitted by a safe upper bound.</source>
            <translation>%1 无法计算词元数；段落按安全的上限估算放入。</translation>
        </message>
        <message>
            <source>Error: %1</source>
            <translation>错误：%1</translation>
        </message>
        <message>
            <source>Generation failed: %1</source>
            <translation>生成失败：%1</translation>
        </message>
        <message>
            <source>Interrupted (the app closed before this reply finished)</source>
            <translation>已中断（回复完成前应用已关闭）</translation>
        </message>
        <message>
            <source>%1 tokens</source>
            <translation>%1 个词元</translation>
        </message>
        <message>
            <source>%1 tok/s</source>
            <translation>%1 词元/秒</translation>
        </message>
        <message>
            <source>stopped</source>
            <translation>已停止</translation>
        </message>
        <message>
            <source>reached the length limit</source>
            <translation>已达到长度上限</translation>
        </message>
        <message>
            <source>Copied</source>
            <translation>已复制</translation>
        </message>
        <message>
            <source>Editing: sending replaces this message and everything after it.</source>
            <translation>编辑中：发送后将替换此消息及其后的所有内容。</translation>
        </message>
        <message>
            <source>Attach documents to this chat</source>
            <translation>将文档附加到此对话</translation>
        </message>
        <message>
            <source>Documents and source code (*)</source>
            <translation>文档和源代码 (*)</translation>
        </message>
        <message>
            <source>Attach a folder to this chat</source>
            <translation>将文件夹附加到此对话</translation>
        </message>
        <message>
            <source>Summarize a document</source>
            <translation>为文档生成摘要</translation>
        </message>
        <message>
            <source>Documents (*.txt *.md *.pdf *.docx *.html *.htm)</source>
            <translation>文档 (*.txt *.md *.pdf *.docx *.html *.htm)</translation>
        </message>
        <message>
            <source>Knowledge bases cannot be used in this session: %1</source>
            <translation>本次运行无法使用知识库：%1</translation>
        </message>
        <message>
            <source>%1 will be summarized as soon as the model is loaded.</source>
            <translation>模型加载完成后将立即总结 %1。</translation>
        </message>
        <message>
            <source>Wait for the current reply to finish (or press Esc).</source>
            <translation>请等待当前回复完成（或按 Esc）。</translation>
        </message>
        <message>
            <source>Reading %1…</source>
            <translation>正在读取 %1…</translation>
        </message>
        <message>
            <source>Could not read the document: %1</source>
            <translation>无法读取文档：%1</translation>
        </message>
        <message>
            <source>Summarizing %1…</source>
            <translation>正在为 %1 生成摘要…</translation>
        </message>
        <message>
            <source>Summarizing was cancelled before any part was done.</source>
            <translation>在完成任何部分之前，摘要已被取消。</translation>
        </message>
        <message>
            <source>first token %1</source>
            <translation>首词元 %1</translation>
        </message>
        <message>
            <source>Summarize the document %1</source>
            <translation>为文档 %1 生成摘要</translation>
        </message>
        <message>
            <source>summarizing…</source>
            <translation>正在生成摘要…</translation>
        </message>
        <message>
            <source>Part %1 of %2</source>
            <translation>第 %1 部分，共 %2 部分</translation>
        </message>
        <message>
            <source>Combining the partial summaries (step %1 of about %2)</source>
            <translation>正在合并部分摘要（第 %1 步，共约 %2 步）</translation>
        </message>
        <message>
            <source>Summarizing stopped early: %1</source>
            <translation>摘要提前停止：%1</translation>
        </message>
        <message>
            <source>Cancelled while combining: all %1 parts were summarized; the partial summaries are shown uncombined.</source>
            <translation>合并时已取消：全部 %1 个部分都已生成摘要；各部分摘要未经合并直接显示。</translation>
        </message>
        <message>
            <source>Stopped while combining: all %1 parts were summarized; the partial summaries are shown uncombined.</source>
            <translation>合并时已停止：全部 %1 个部分都已生成摘要；各部分摘要未经合并直接显示。</translation>
        </message>
        <message>
            <source>Cancelled: the summary covers %1 of %2 parts (%3% of the document).</source>
            <translation>已取消：摘要涵盖 %2 部分中的 %1 部分（文档的 %3%）。</translation>
        </message>
        <message>
            <source>The whole document was read (%1 tokens, one part).</source>
            <translation>已读取整篇文档（%1 个词元，一个部分）。</translation>
        </message>
        <message>
            <source>The whole document was read: %1 tokens in %2 parts, summarized and combined.</source>
            <translation>已读取整篇文档：%1 个词元，分 %2 部分分别摘要后合并。</translation>
        </message>
        <message>
            <source>Summarizing failed: %1</source>
            <translation>生成摘要失败：%1</translation>
        </message>
        <message>
            <source>Stopped by an error: the summary covers %1 of %2 parts (%3% of the document).</source>
            <translation>因错误而停止：摘要涵盖了 %2 个部分中的 %1 个（文档的 %3%）。</translation>
        </message>
        <message>
            <source>Could not save settings: %1</source>
            <translation>无法保存设置：%1</translation>
        </message>
    </context>
    <context>
        <name>MessageWidget</name>
        <message>
            <source>You</source>
            <translation>你</translation>
        </message>
        <message>
            <source>Assistant</source>
            <translation>助手</translation>
        </message>
        <message>
            <source>Copy</source>
            <translation>复制</translation>
        </message>
        <message>
            <source>Copy this message</source>
            <translation>复制这条消息</translation>
        </message>
        <message>
            <source>Edit</source>
            <translation>编辑</translation>
        </message>
        <message>
            <source>Edit this message and send it again</source>
            <translation>编辑此消息并重新发送</translation>
        </message>
        <message>
            <source>Regenerate</source>
            <translation>重新生成</translation>
        </message>
        <message>
            <source>Generate this reply again</source>
            <translation>重新生成此回复</translation>
        </message>
        <message>
            <source>Thinking</source>
            <translation>思考</translation>
        </message>
        <message>
            <source>Show or hide the model's thinking</source>
            <translation>显示或隐藏模型的思考过程</translation>
        </message>
        <message>
            <source>Model thinking</source>
            <translation>模型思考过程</translation>
        </message>
        <message>
            <source>Message from you</source>
            <translation>你的消息</translation>
        </message>
        <message>
            <source>Reply</source>
            <translation>回复</translation>
        </message>
        <message>
            <source>Sources of this answer</source>
            <translation>此回答的来源</translation>
        </message>
        <message>
            <source>Left out (did not fit in the context): %1</source>
            <translation>未采用（上下文放不下）：%1</translation>
        </message>
    </context>
    <context>
        <name>MirrorDialog</name>
        <message>
            <source>Use a mirror</source>
            <translation>使用镜像</translation>
        </message>
        <message>
            <source>Choose where downloads come from</source>
            <translation>选择下载来源</translation>
        </message>
        <message>
            <source>Where should models be downloaded from?</source>
            <translation>要从哪里下载模型？</translation>
        </message>
        <message>
            <source>Hugging Face (huggingface.co)</source>
            <translation>Hugging Face（huggingface.co）</translation>
        </message>
        <message>
            <source>hf-mirror.com (a public mirror of Hugging Face)</source>
            <translation>hf-mirror.com（Hugging Face 的公共镜像）</translation>
        </message>
        <message>
            <source>ModelScope (modelscope.cn)</source>
            <translation>ModelScope（modelscope.cn）</translation>
        </message>
        <message>
            <source>Another Hugging Face mirror:</source>
            <translation>其他 Hugging Face 镜像：</translation>
        </message>
        <message>
            <source>Mirror address</source>
            <translation>镜像地址</translation>
        </message>
        <message>
            <source>Note: HF_ENDPOINT is set to %1 in this program's environment; it overrides the Hugging Face choices here.</source>
            <translation>注意：本程序的环境变量 HF_ENDPOINT 已设置为 %1，它会覆盖此处的 Hugging Face 选项。</translation>
        </message>
        <message>
            <source>Type the mirror's address, for example https://hf-mirror.com.</source>
            <translation>请输入镜像地址，例如 https://hf-mirror.com。</translation>
        </message>
        <message>
            <source>%1 is not a web address (it must start with https:// or http://).</source>
            <translation>%1 不是网址（必须以 https:// 或 http:// 开头）。</translation>
        </message>
        <message>
            <source>Could not save the download settings: %1</source>
            <translation>无法保存下载设置：%1</translation>
        </message>
    </context>
    <context>
        <name>ModelManagerDialog</name>
        <message>
            <source>Models</source>
            <translation>模型</translation>
        </message>
        <message>
            <source>Model manager</source>
            <translation>模型管理器</translation>
        </message>
        <message>
            <source>This computer: %1 with %2 free of %3; RAM %4 available.</source>
            <translation>本机：%1，%3 中空闲 %2；可用内存 %4。</translation>
        </message>
        <message>
            <source>This computer: no supported GPU found; models run on the CPU (%1). RAM %2 available.</source>
            <translation>本机：未找到受支持的 GPU，模型将在 CPU（%1）上运行。可用内存 %2。</translation>
        </message>
        <message>
            <source>Detected hardware</source>
            <translation>检测到的硬件</translation>
        </message>
        <message>
            <source>Model</source>
            <translation>模型</translation>
        </message>
        <message>
            <source>Variant</source>
            <translation>版本</translation>
        </message>
        <message>
            <source>Size</source>
            <translation>大小</translation>
        </message>
        <message>
            <source>Fits this computer?</source>
            <translation>本机能否运行？</translation>
        </message>
        <message>
            <source>Status</source>
            <translation>状态</translation>
        </message>
        <message>
            <source>Columns</source>
            <translation>列</translation>
        </message>
        <message>
            <source>Rows</source>
            <translation>行</translation>
        </message>
        <message>
            <source>Download progress</source>
            <translation>下载进度</translation>
        </message>
        <message>
            <source>Download status</source>
            <translation>下载状态</translation>
        </message>
        <message>
            <source>Verification result</source>
            <translation>校验结果</translation>
        </message>
        <message>
            <source>Download</source>
            <translation>下载</translation>
        </message>
        <message>
            <source>Download the selected model</source>
            <translation>下载所选模型</translation>
        </message>
        <message>
            <source>Pause</source>
            <translation>暂停</translation>
        </message>
        <message>
            <source>Pause the download (keeps what was downloaded)</source>
            <translation>暂停下载（保留已下载的部分）</translation>
        </message>
        <message>
            <source>Resume</source>
            <translation>继续</translation>
        </message>
        <message>
            <source>Resume the paused download</source>
            <translation>继续已暂停的下载</translation>
        </message>
        <message>
            <source>Cancel</source>
            <translation>取消</translation>
        </message>
        <message>
            <source>Cancel the download and delete the partial file</source>
            <translation>取消下载并删除未完成的文件</translation>
        </message>
        <message>
            <source>Use</source>
            <translation>使用</translation>
        </message>
        <message>
            <source>Load the selected model and chat</source>
            <translation>加载所选模型并聊天</translation>
        </message>
        <message>
            <source>the download server</source>
            <translation>下载服务器</translation>
        </message>
        <message>
            <source>; %1 kept, Retry resumes</source>
            <translation>；已保留 %1，重试将继续下载</translation>
        </message>
        <message>
            <source>could not reach %1 (no network or blocked)</source>
            <translation>无法连接到 %1（没有网络或被阻止）</translation>
        </message>
        <message>
            <source>the connection to %1 dropped after %2; Retry resumes</source>
            <translation>与 %1 的连接在下载 %2 后中断；重试将继续下载</translation>
        </message>
        <message>
            <source>the connection to %1 dropped before any data arrived; Retry starts again</source>
            <translation>与 %1 的连接在收到任何数据之前中断；重试将重新开始</translation>
        </message>
        <message>
            <source>the download from %1 stopped sending data</source>
            <translation>来自 %1 的下载停止发送数据</translation>
        </message>
        <message>
            <source>%1 did not answer (network or proxy problem)</source>
            <translation>%1 没有响应（网络或代理问题）</translation>
        </message>
        <message>
            <source>downloads are switched off on this computer (HF_HUB_OFFLINE is set)</source>
            <translation>此电脑已关闭下载（设置了 HF_HUB_OFFLINE）</translation>
        </message>
        <message>
            <source>the access token is missing, wrong or expired</source>
            <translation>访问令牌缺失、错误或已过期</translation>
        </message>
        <message>
            <source>the model may need its licence accepted on the website, or the token lacks read permission</source>
            <translation>该模型可能需要先在网站上接受其许可协议，或令牌缺少读取权限</translation>
        </message>
        <message>
            <source>access denied</source>
            <translation>访问被拒绝</translation>
        </message>
        <message>
            <source>the server refused: %1 (%2)</source>
            <translation>服务器拒绝：%1（%2）</translation>
        </message>
        <message>
            <source>%1 does not have this file (%2); try a mirror</source>
            <translation>%1 上没有此文件（%2）；请尝试镜像</translation>
        </message>
        <message>
            <source>not found</source>
            <translation>未找到</translation>
        </message>
        <message>
            <source>try again in %1 s</source>
            <translation>请在 %1 秒后重试</translation>
        </message>
        <message>
            <source>try again later</source>
            <translation>请稍后重试</translation>
        </message>
        <message>
            <source>%1 is limiting downloads (%2); %3</source>
            <translation>%1 正在限制下载（%2）；%3</translation>
        </message>
        <message>
            <source>%1 had a problem (%2); try again later or use a mirror</source>
            <translation>%1 出现问题（%2）；请稍后重试或使用镜像</translation>
        </message>
        <message>
            <source>an unexpected answer</source>
            <translation>意外的响应</translation>
        </message>
        <message>
            <source>an unexpected problem</source>
            <translation>意外的问题</translation>
        </message>
        <message>
            <source>Delete…</source>
            <translation>删除…</translation>
        </message>
        <message>
            <source>Remove the selected model (asks first, says what happens to its file)</source>
            <translation>移除所选模型（会先询问，并说明其文件将如何处理）</translation>
        </message>
        <message>
            <source>Import file…</source>
            <translation>导入文件…</translation>
        </message>
        <message>
            <source>Import a .gguf or .ternary file</source>
            <translation>导入 .gguf 或 .ternary 文件</translation>
        </message>
        <message>
            <source>Import folder…</source>
            <translation>导入文件夹…</translation>
        </message>
        <message>
            <source>Import a Hugging Face model folder</source>
            <translation>导入 Hugging Face 模型文件夹</translation>
        </message>
        <message>
            <source>Convert…</source>
            <translation>转换…</translation>
        </message>
        <message>
            <source>Convert a model to the .ternary format</source>
            <translation>将模型转换为 .ternary 格式</translation>
        </message>
        <message>
            <source>The model catalog could not be read: %1</source>
            <translation>无法读取模型目录：%1</translation>
        </message>
        <message>
            <source>Embedding model (for document search)</source>
            <translation>嵌入模型（用于文档搜索）</translation>
        </message>
        <message>
            <source>imported</source>
            <translation>已导入</translation>
        </message>
        <message>
            <source>Yes, on the GPU</source>
            <translation>可以，在 GPU 上运行</translation>
        </message>
        <message>
            <source>On the CPU only (slow)</source>
            <translation>仅能在 CPU 上运行（较慢）</translation>
        </message>
        <message>
            <source>No (not enough memory)</source>
            <translation>否（内存不足）</translation>
        </message>
        <message>
            <source>Unknown</source>
            <translation>未知</translation>
        </message>
        <message>
            <source>Recommended</source>
            <translation>推荐</translation>
        </message>
        <message>
            <source>Downloading…</source>
            <translation>下载中…</translation>
        </message>
        <message>
            <source>Installed, verified</source>
            <translation>已安装，已校验</translation>
        </message>
        <message>
            <source>Changed on disk since verification — not loadable</source>
            <translation>校验后文件已被修改 — 无法加载</translation>
        </message>
        <message>
            <source>File missing</source>
            <translation>文件缺失</translation>
        </message>
        <message>
            <source>Imported (loaded in place)</source>
            <translation>已导入（在原位置加载）</translation>
        </message>
        <message>
            <source>Paused at %1</source>
            <translation>已暂停于 %1</translation>
        </message>
        <message>
            <source>Not downloaded</source>
            <translation>未下载</translation>
        </message>
        <message>
            <source>An embedding model is used by document search, not for chat</source>
            <translation>嵌入模型用于文档搜索，不能用来聊天</translation>
        </message>
        <message>
            <source>Connecting…</source>
            <translation>正在连接…</translation>
        </message>
        <message>
            <source>Verifying</source>
            <translation>正在校验</translation>
        </message>
        <message>
            <source>Checking the partial file</source>
            <translation>正在检查未完成的文件</translation>
        </message>
        <message>
            <source>Downloading</source>
            <translation>正在下载</translation>
        </message>
        <message>
            <source>%1: %2 of %3 · %4/s · %5 left</source>
            <translation>%1：%2 / %3 · %4/秒 · 剩余 %5</translation>
        </message>
        <message>
            <source>Already installed and verified: %1</source>
            <translation>已安装并通过校验：%1</translation>
        </message>
        <message>
            <source>Downloaded and verified: %1 (%2, sha256 %3…)</source>
            <translation>已下载并通过校验：%1（%2，sha256 %3…）</translation>
        </message>
        <message>
            <source>Verification failed</source>
            <translation>校验失败</translation>
        </message>
        <message>
            <source>Download failed</source>
            <translation>下载失败</translation>
        </message>
        <message>
            <source>Download cancelled; the partial file was deleted.</source>
            <translation>下载已取消；未完成的文件已删除。</translation>
        </message>
        <message>
            <source>Paused. Resume continues where it stopped.</source>
            <translation>已暂停。继续下载将从中断处开始。</translation>
        </message>
        <message>
            <source>Pausing…</source>
            <translation>正在暂停…</translation>
        </message>
        <message>
            <source>Cancelling…</source>
            <translation>正在取消…</translation>
        </message>
        <message>
            <source>The partial download was deleted.</source>
            <translation>未完成的下载已删除。</translation>
        </message>
        <message>
            <source>Remove %1 from the list? Its file %2 is already gone.</source>
            <translation>从列表中移除 %1？其文件 %2 已不存在。</translation>
        </message>
        <message>
            <source>Remove from list</source>
            <translation>从列表中移除</translation>
        </message>
        <message>
            <source>Remove %1 from the list and delete the file (%2)?
%3</source>
            <translation>从列表中移除 %1 并删除该文件（%2）？
%3</translation>
        </message>
        <message>
            <source>It is the model in use: it will be unloaded first.</source>
            <translation>这是当前使用的模型：将先卸载它。</translation>
        </message>
        <message>
            <source>Delete file</source>
            <translation>删除文件</translation>
        </message>
        <message>
            <source>Remove %1 from the list? The file stays at %2.</source>
            <translation>从列表中移除 %1？文件仍保留在 %2。</translation>
        </message>
        <message>
            <source>Delete model</source>
            <translation>删除模型</translation>
        </message>
        <message>
            <source>Import a model file</source>
            <translation>导入模型文件</translation>
        </message>
        <message>
            <source>Models (*.gguf *.ternary)</source>
            <translation>模型 (*.gguf *.ternary)</translation>
        </message>
    </context>
    <context>
        <name>NumberField</name>
        <message>
            <source>Temperature must be between 0 (greedy, always the likeliest token) and 2.</source>
            <translation>温度必须介于 0（贪心，总是选择最可能的词元）和 2 之间。</translation>
        </message>
        <message>
            <source>Top-p must be above 0 and at most 1 (1 turns it off).</source>
            <translation>Top-p 必须大于 0 且不超过 1（1 表示关闭）。</translation>
        </message>
        <message>
            <source>Top-k must be a whole number from 0 (off) to 1000.</source>
            <translation>Top-k 必须是 0（关闭）到 1000 之间的整数。</translation>
        </message>
        <message>
            <source>Min-p must be between 0 (off) and 1.</source>
            <translation>Min-p 必须介于 0（关闭）和 1 之间。</translation>
        </message>
        <message>
            <source>Repetition penalty must be between 0.5 and 2 (1 turns it off).</source>
            <translation>重复惩罚必须介于 0.5 和 2 之间（1 表示关闭）。</translation>
        </message>
        <message>
            <source>Presence penalty must be between -2 and 2 (0 turns it off).</source>
            <translation>存在惩罚必须介于 -2 和 2 之间（0 表示关闭）。</translation>
        </message>
        <message>
            <source>Max new tokens must be a whole number from 1 to 262144.</source>
            <translation>最大新词元数必须是 1 到 262144 之间的整数。</translation>
        </message>
        <message>
            <source>The seed must be a whole number from 0 to 18446744073709551615 (empty = random).</source>
            <translation>种子必须是 0 到 18446744073709551615 之间的整数（留空 = 随机）。</translation>
        </message>
        <message>
            <source>Context length must be 0 (Auto) or a whole number of tokens up to 1048576.</source>
            <translation>上下文长度必须为 0（自动）或不超过 1048576 的整数词元数。</translation>
        </message>
        <message>
            <source>The VRAM cap must be 0 (no cap) or a size in GiB up to 4096.</source>
            <translation>显存上限必须为 0（不限制）或不超过 4096 的 GiB 数值。</translation>
        </message>
        <message>
            <source>a whole number</source>
            <translation>整数</translation>
        </message>
        <message>
            <source>a number</source>
            <translation>数字</translation>
        </message>
        <message>
            <source>“%1” is not %2.</source>
            <translation>“%1”不是%2。</translation>
        </message>
    </context>
    <context>
        <name>PassageDialog</name>
        <message>
            <source>Source [%1]</source>
            <translation>来源 [%1]</translation>
        </message>
        <message>
            <source>Passage</source>
            <translation>段落</translation>
        </message>
        <message>
            <source>Passage text</source>
            <translation>段落文本</translation>
        </message>
        <message>
            <source>Open file</source>
            <translation>打开文件</translation>
        </message>
        <message>
            <source>Open the file in its application</source>
            <translation>用对应的应用程序打开文件</translation>
        </message>
        <message>
            <source>The file is no longer at %1; the text below is the copy that was indexed.</source>
            <translation>文件已不在 %1；下面是建立索引时保存的文本。</translation>
        </message>
        <message>
            <source>This passage is no longer in the index (the file was changed or removed since this answer); the text below is the quote saved with the answer.</source>
            <translation>此段落已不在索引中（回答之后文件被修改或移除）；下面是随回答保存的引文。</translation>
        </message>
        <message>
            <source>The file has changed since it was indexed; the text below is the indexed copy and may differ from the file now.</source>
            <translation>文件在建立索引后已被修改；下面是索引中的文本，可能与现在的文件不同。</translation>
        </message>
        <message>
            <source>Left out of the answer: it did not fit in the context.</source>
            <translation>未用于回答：上下文放不下它。</translation>
        </message>
        <message>
            <source>Left out of the answer: this passage needs %1 tokens and only %2 were left in the context.</source>
            <translation>未用于回答：此段落需要 %1 个词元，而上下文中只剩 %2 个。</translation>
        </message>
        <message>
            <source>Left out of the answer: %1</source>
            <translation>未用于回答：%1</translation>
        </message>
        <message>
            <source>The file is no longer at %1.</source>
            <translation>文件已不在 %1。</translation>
        </message>
    </context>
    <context>
        <name>RemotesPage</name>
        <message>
            <source>Chat with a model served by another machine: another Ternary Chat, llama-server, vLLM, SGLang, Ollama or any OpenAI-compatible server. Its models appear in the model picker.</source>
            <translation>与另一台机器提供的模型对话：另一个 Ternary Chat、llama-server、vLLM、SGLang、Ollama 或任何 OpenAI 兼容服务器。其模型会出现在模型选择器中。</translation>
        </message>
        <message>
            <source>Remote backends</source>
            <translation>远程后端</translation>
        </message>
        <message>
            <source>Remote name</source>
            <translation>远程名称</translation>
        </message>
        <message>
            <source>e.g. workstation</source>
            <translation>例如 workstation</translation>
        </message>
        <message>
            <source>Remote address</source>
            <translation>远程地址</translation>
        </message>
        <message>
            <source>Remote API key</source>
            <translation>远程 API 密钥</translation>
        </message>
        <message>
            <source>optional; kept in the system keyring</source>
            <translation>可选；保存在系统密钥环中</translation>
        </message>
        <message>
            <source>Name</source>
            <translation>名称</translation>
        </message>
        <message>
            <source>Address</source>
            <translation>地址</translation>
        </message>
        <message>
            <source>API key</source>
            <translation>API 密钥</translation>
        </message>
        <message>
            <source>Add or update</source>
            <translation>添加或更新</translation>
        </message>
        <message>
            <source>Remove</source>
            <translation>移除</translation>
        </message>
        <message>
            <source>Remove the remote</source>
            <translation>移除该远程</translation>
        </message>
        <message>
            <source>List models</source>
            <translation>列出模型</translation>
        </message>
        <message>
            <source>List the remote's models again</source>
            <translation>重新列出远程的模型</translation>
        </message>
        <message>
            <source>Remote message</source>
            <translation>远程消息</translation>
        </message>
        <message>
            <source>error: %1</source>
            <translation>错误：%1</translation>
        </message>
        <message>
            <source>%1 models</source>
            <translation>%1 个模型</translation>
        </message>
        <message>
            <source>not listed yet (Apply, then List models)</source>
            <translation>尚未列出（先点“应用”，再点“列出模型”）</translation>
        </message>
        <message>
            <source>No secure keyring is available: the key is kept in memory until the app closes.</source>
            <translation>没有可用的安全密钥环：密钥仅保存在内存中，直到应用关闭。</translation>
        </message>
        <message>
            <source>%1 added: click Apply or OK to list its models.</source>
            <translation>已添加 %1：点击“应用”或“确定”以列出其模型。</translation>
        </message>
        <message>
            <source>%1 removed.</source>
            <translation>已移除 %1。</translation>
        </message>
        <message>
            <source>Listing the models…</source>
            <translation>正在列出模型…</translation>
        </message>
        <message>
            <source>Click Apply first.</source>
            <translation>请先点击“应用”。</translation>
        </message>
    </context>
    <context>
        <name>ServerPage</name>
        <message>
            <source>Serve the loaded model to other programs (OpenAI and Anthropic APIs)</source>
            <translation>向其他程序提供已加载的模型（OpenAI 和 Anthropic API）</translation>
        </message>
        <message>
            <source>Local server on</source>
            <translation>开启本地服务器</translation>
        </message>
        <message>
            <source>Server address</source>
            <translation>服务器地址</translation>
        </message>
        <message>
            <source>127.0.0.1: only this computer can connect. Another address (e.g. 0.0.0.0) lets other computers connect and needs an API key.</source>
            <translation>127.0.0.1：只有本机可以连接。其他地址（例如 0.0.0.0）允许其他计算机连接，并且需要 API 密钥。</translation>
        </message>
        <message>
            <source>Address</source>
            <translation>地址</translation>
        </message>
        <message>
            <source>Server port</source>
            <translation>服务器端口</translation>
        </message>
        <message>
            <source>Port</source>
            <translation>端口</translation>
        </message>
        <message>
            <source>API key status</source>
            <translation>API 密钥状态</translation>
        </message>
        <message>
            <source>type a new key</source>
            <translation>输入新密钥</translation>
        </message>
        <message>
            <source>New API key</source>
            <translation>新的 API 密钥</translation>
        </message>
        <message>
            <source>Save</source>
            <translation>保存</translation>
        </message>
        <message>
            <source>Save the API key in the keyring</source>
            <translation>将 API 密钥保存到密钥环</translation>
        </message>
        <message>
            <source>Remove</source>
            <translation>移除</translation>
        </message>
        <message>
            <source>Remove the API key</source>
            <translation>移除 API 密钥</translation>
        </message>
        <message>
            <source>API key</source>
            <translation>API 密钥</translation>
        </message>
        <message>
            <source>Server URL</source>
            <translation>服务器 URL</translation>
        </message>
        <message>
            <source>Copy</source>
            <translation>复制</translation>
        </message>
        <message>
            <source>Copy the server URL</source>
            <translation>复制服务器 URL</translation>
        </message>
        <message>
            <source>URL</source>
            <translation>URL</translation>
        </message>
        <message>
            <source>Server state</source>
            <translation>服务器状态</translation>
        </message>
        <message>
            <source>Clients use the URL above with /v1 (OpenAI) or /v1/messages (Anthropic). The key is kept in the system keyring, never in the settings file. API requests and your own chat take turns on the model.</source>
            <translation>客户端使用上面的 URL 加 /v1（OpenAI）或 /v1/messages（Anthropic）。密钥保存在系统密钥环中，绝不写入设置文件。API 请求与您自己的对话轮流使用模型。</translation>
        </message>
        <message>
            <source>The address must be a host name or IP address such as 127.0.0.1.</source>
            <translation>地址必须是主机名或 IP 地址，例如 127.0.0.1。</translation>
        </message>
        <message>
            <source>Set an API key first: a server on %1 can be reached from other computers.</source>
            <translation>请先设置 API 密钥：位于 %1 的服务器可被其他计算机访问。</translation>
        </message>
        <message>
            <source>stored: ••••••••</source>
            <translation>已保存：••••••••</translation>
        </message>
        <message>
            <source>none</source>
            <translation>无</translation>
        </message>
        <message>
            <source>Running at %1, serving %2.</source>
            <translation>正在 %1 运行，提供 %2。</translation>
        </message>
        <message>
            <source>Not running: %1</source>
            <translation>未运行：%1</translation>
        </message>
        <message>
            <source>Not running.</source>
            <translation>未运行。</translation>
        </message>
        <message>
            <source>It starts when a local model is loaded.</source>
            <translation>加载本地模型后启动。</translation>
        </message>
        <message>
            <source>Type a key first.</source>
            <translation>请先输入密钥。</translation>
        </message>
        <message>
            <source>API key saved in the system keyring.</source>
            <translation>API 密钥已保存到系统密钥环。</translation>
        </message>
        <message>
            <source>No secure keyring is available: the key is kept in memory until the app closes.</source>
            <translation>没有可用的安全密钥环：密钥仅保存在内存中，直到应用关闭。</translation>
        </message>
    </context>
    <context>
        <name>SettingsDialog</name>
        <message>
            <source>Settings</source>
            <translation>设置</translation>
        </message>
        <message>
            <source>Settings sections</source>
            <translation>设置分类</translation>
        </message>
        <message>
            <source>Sampling</source>
            <translation>采样</translation>
        </message>
        <message>
            <source>Hardware</source>
            <translation>硬件</translation>
        </message>
        <message>
            <source>Downloads</source>
            <translation>下载</translation>
        </message>
        <message>
            <source>Local server</source>
            <translation>本地服务器</translation>
        </message>
        <message>
            <source>Remote backends</source>
            <translation>远程后端</translation>
        </message>
        <message>
            <source>Interface</source>
            <translation>界面</translation>
        </message>
        <message>
            <source>model default: %1</source>
            <translation>模型默认：%1</translation>
        </message>
        <message>
            <source>model default</source>
            <translation>模型默认</translation>
        </message>
        <message>
            <source>random</source>
            <translation>随机</translation>
        </message>
        <message>
            <source>(no model loaded: defaults for models without their own settings)</source>
            <translation>（未加载模型：用于没有单独设置的模型的默认值）</translation>
        </message>
        <message>
            <source>Sampling for: %1</source>
            <translation>采样设置：%1</translation>
        </message>
        <message>
            <source>Temperature</source>
            <translation>温度</translation>
        </message>
        <message>
            <source>Top-p</source>
            <translation>Top-p</translation>
        </message>
        <message>
            <source>Top-k</source>
            <translation>Top-k</translation>
        </message>
        <message>
            <source>Min-p</source>
            <translation>Min-p</translation>
        </message>
        <message>
            <source>Repetition penalty</source>
            <translation>重复惩罚</translation>
        </message>
        <message>
            <source>Presence penalty</source>
            <translation>存在惩罚</translation>
        </message>
        <message>
            <source>Max new tokens</source>
            <translation>最大生成词元数</translation>
        </message>
        <message>
            <source>Seed</source>
            <translation>随机种子</translation>
        </message>
        <message>
            <source>System prompt</source>
            <translation>系统提示词</translation>
        </message>
        <message>
            <source>Optional instructions sent before every conversation</source>
            <translation>可选：每次对话前发送给模型的指令</translation>
        </message>
        <message>
            <source>Thinking</source>
            <translation>思考</translation>
        </message>
        <message>
            <source>Model default</source>
            <translation>模型默认</translation>
        </message>
        <message>
            <source>On</source>
            <translation>开</translation>
        </message>
        <message>
            <source>Off</source>
            <translation>关</translation>
        </message>
        <message>
            <source>The loaded model does not think before answering.</source>
            <translation>当前加载的模型不会在回答前思考。</translation>
        </message>
        <message>
            <source>Reasoning effort</source>
            <translation>推理强度</translation>
        </message>
        <message>
            <source>Low</source>
            <translation>低</translation>
        </message>
        <message>
            <source>Medium</source>
            <translation>中</translation>
        </message>
        <message>
            <source>High</source>
            <translation>高</translation>
        </message>
        <message>
            <source>Used by models whose chat template accepts a reasoning effort (Ternary-Bonsai 2); other models ignore it.</source>
            <translation>仅对聊天模板支持推理强度的模型（Ternary-Bonsai 2）有效；其他模型会忽略。</translation>
        </message>
        <message>
            <source>Reset to model defaults</source>
            <translation>恢复模型默认值</translation>
        </message>
        <message>
            <source>Reset sampling to the model's defaults</source>
            <translation>将采样参数恢复为模型默认值</translation>
        </message>
        <message>
            <source>Device</source>
            <translation>设备</translation>
        </message>
        <message>
            <source>Auto (best available)</source>
            <translation>自动（最佳可用设备）</translation>
        </message>
        <message>
            <source>CPU</source>
            <translation>CPU</translation>
        </message>
        <message>
            <source>Auto (largest that fits, from the planner)</source>
            <translation>自动（由规划器选择可容纳的最大值）</translation>
        </message>
        <message>
            <source>Automatic context length</source>
            <translation>自动上下文长度</translation>
        </message>
        <message>
            <source>Context length</source>
            <translation>上下文长度</translation>
        </message>
        <message>
            <source>Manual context length (tokens)</source>
            <translation>手动上下文长度（词元）</translation>
        </message>
        <message>
            <source>tokens, e.g. 8192</source>
            <translation>词元数，例如 8192</translation>
        </message>
        <message>
            <source>A manual context length must be at least %1 tokens.</source>
            <translation>手动设置的上下文长度至少为 %1 个词元。</translation>
        </message>
        <message>
            <source>This model supports at most %1 tokens.</source>
            <translation>此模型最多支持 %1 个词元。</translation>
        </message>
        <message>
            <source>Memory cost of the context length</source>
            <translation>上下文长度的内存开销</translation>
        </message>
        <message>
            <source>Offload policy</source>
            <translation>卸载策略</translation>
        </message>
        <message>
            <source>Automatic (planner decides)</source>
            <translation>自动（由规划器决定）</translation>
        </message>
        <message>
            <source>Stream layers to the GPU</source>
            <translation>将层流式传输到 GPU</translation>
        </message>
        <message>
            <source>Offload applies to GPUs: it decides how layers that do not fit in VRAM run. This computer has no usable GPU, so every layer runs on the CPU.</source>
            <translation>卸载仅适用于 GPU：它决定放不进显存的层如何运行。本机没有可用的 GPU，因此所有层都在 CPU 上运行。</translation>
        </message>
        <message>
            <source>Now: %1</source>
            <translation>当前：%1</translation>
        </message>
        <message>
            <source>int8 (8-bit, half the memory)</source>
            <translation>int8（8 位，内存减半）</translation>
        </message>
        <message>
            <source>int8 stores the conversation memory in 8 bits: about twice the context fits, at a small accuracy cost. Used from the next model load.</source>
            <translation>int8 以 8 位存储对话记忆（KV 缓存）：可容纳约两倍的上下文，但精度略有损失。下次加载模型时生效。</translation>
        </message>
        <message>
            <source>KV-cache precision trade-off</source>
            <translation>KV 缓存精度的取舍</translation>
        </message>
        <message>
            <source>Decode precision</source>
            <translation>解码精度</translation>
        </message>
        <message>
            <source>Fast (8-bit activations)</source>
            <translation>快速（8 位激活）</translation>
        </message>
        <message>
            <source>Exact</source>
            <translation>精确</translation>
        </message>
        <message>
            <source>Decode precision trade-off</source>
            <translation>解码精度的取舍</translation>
        </message>
        <message>
            <source>Models folder</source>
            <translation>模型文件夹</translation>
        </message>
        <message>
            <source>Where downloaded models are stored. Models already downloaded stay in their folder.</source>
            <translation>下载的模型存放的位置。已下载的模型保留在原文件夹中。</translation>
        </message>
        <message>
            <source>Choose…</source>
            <translation>选择…</translation>
        </message>
        <message>
            <source>Choose the models folder</source>
            <translation>选择模型文件夹</translation>
        </message>
        <message>
            <source>Models folder check</source>
            <translation>模型文件夹检查</translation>
        </message>
        <message>
            <source>Compute offloaded layers on the CPU</source>
            <translation>在 CPU 上计算卸载的层</translation>
        </message>
        <message>
            <source>Read layers from host memory (zero-copy)</source>
            <translation>由 GPU 直接从内存读取层（零拷贝）</translation>
        </message>
        <message>
            <source>When a model does not fit in VRAM, some layers stay in RAM: their weights are streamed to the GPU for every token, or the GPU reads them in place from RAM (zero-copy: no staging buffers, same results as with everything in VRAM), or the CPU computes them. Automatic picks the fastest one per token.</source>
            <translation>模型放不进显存时，部分层留在内存中：要么每个词元都把它们的权重流式传输到 GPU，要么由 GPU 直接从内存中读取（零拷贝：无需中转缓冲区，结果与全部放在显存中时相同），要么由 CPU 计算。自动会选择每个词元最快的方式。</translation>
        </message>
        <message>
            <source>Current layer placement</source>
            <translation>当前层分布</translation>
        </message>
        <message>
            <source>Layer placement</source>
            <translation>层分布</translation>
        </message>
        <message>
            <source>KV-cache precision</source>
            <translation>KV 缓存精度</translation>
        </message>
        <message>
            <source>Auto (fp32 on CPU, bf16 on GPU)</source>
            <translation>自动（CPU 用 fp32，GPU 用 bf16）</translation>
        </message>
        <message>
            <source>Fast rounds each token's activations to 8 bits inside the matrix kernels, like llama.cpp: on a GPU about 1.6x faster answers, on the CPU faster where the processor has 8-bit dot products; slightly different wording. Exact keeps full precision. Used from the next model load.</source>
            <translation>快速模式会在矩阵内核中把每个词元的激活值舍入到 8 位（与 llama.cpp 相同）：在 GPU 上回答快约 1.6 倍，在 CPU 上当处理器支持 8 位点积时更快；措辞可能略有不同。精确模式保持完整精度。从下次加载模型起生效。</translation>
        </message>
        <message>
            <source>VRAM cap (GiB, 0 = none)</source>
            <translation>显存上限（GiB，0 = 不限）</translation>
        </message>
        <message>
            <source>Hardware changes reload the model when you press OK.</source>
            <translation>按“确定”后，硬件设置的更改会重新加载模型。</translation>
        </message>
        <message>
            <source>Download source</source>
            <translation>下载来源</translation>
        </message>
        <message>
            <source>Auto (Hugging Face, then ModelScope)</source>
            <translation>自动（先 Hugging Face，后 ModelScope）</translation>
        </message>
        <message>
            <source>Source</source>
            <translation>来源</translation>
        </message>
        <message>
            <source>Hugging Face mirror endpoint</source>
            <translation>Hugging Face 镜像地址</translation>
        </message>
        <message>
            <source>ModelScope endpoint</source>
            <translation>ModelScope 地址</translation>
        </message>
        <message>
            <source>Hugging Face endpoint</source>
            <translation>Hugging Face 地址</translation>
        </message>
        <message>
            <source>%1 token status</source>
            <translation>%1 令牌状态</translation>
        </message>
        <message>
            <source>paste a new token</source>
            <translation>粘贴新令牌</translation>
        </message>
        <message>
            <source>New %1 token</source>
            <translation>新的 %1 令牌</translation>
        </message>
        <message>
            <source>Save</source>
            <translation>保存</translation>
        </message>
        <message>
            <source>Save the %1 token in the keyring</source>
            <translation>将 %1 令牌保存到系统钥匙串</translation>
        </message>
        <message>
            <source>Remove</source>
            <translation>移除</translation>
        </message>
        <message>
            <source>Remove the %1 token</source>
            <translation>移除 %1 令牌</translation>
        </message>
        <message>
            <source>%1 token</source>
            <translation>%1 令牌</translation>
        </message>
        <message>
            <source>Token message</source>
            <translation>令牌提示</translation>
        </message>
        <message>
            <source>Interface language</source>
            <translation>界面语言</translation>
        </message>
        <message>
            <source>Language</source>
            <translation>语言</translation>
        </message>
        <message>
            <source>Theme</source>
            <translation>主题</translation>
        </message>
        <message>
            <source>Light</source>
            <translation>浅色</translation>
        </message>
        <message>
            <source>Dark</source>
            <translation>深色</translation>
        </message>
        <message>
            <source>System (follow the desktop)</source>
            <translation>跟随系统（与桌面一致）</translation>
        </message>
        <message>
            <source>The theme and the language change when you click Apply or OK; no restart is needed.</source>
            <translation>点击“应用”或“确定”后主题和语言即生效，无需重启。</translation>
        </message>
        <message>
            <source>Enter a context length or choose Auto.</source>
            <translation>请输入上下文长度或选择“自动”。</translation>
        </message>
        <message>
            <source>A mirror endpoint must be a web address starting with https:// or http://.</source>
            <translation>镜像地址必须是以 https:// 或 http:// 开头的网址。</translation>
        </message>
        <message>
            <source>%1 free.</source>
            <translation>可用空间 %1。</translation>
        </message>
        <message>
            <source>The folder will be created.</source>
            <translation>将创建该文件夹。</translation>
        </message>
        <message>
            <source>Choose a folder for the models.</source>
            <translation>请选择存放模型的文件夹。</translation>
        </message>
        <message>
            <source>Enter a full path (for example /home/me/models).</source>
            <translation>请输入完整路径（例如 /home/me/models）。</translation>
        </message>
        <message>
            <source>This path is a file, not a folder.</source>
            <translation>该路径是文件，不是文件夹。</translation>
        </message>
        <message>
            <source>This folder does not exist and cannot be created here.</source>
            <translation>该文件夹不存在，且无法在此处创建。</translation>
        </message>
        <message>
            <source>This folder is not writable: downloads could not be saved in it.</source>
            <translation>该文件夹不可写：下载的文件无法保存到其中。</translation>
        </message>
        <message>
            <source>At most %1: the context in use holds %2 tokens, and the prompt takes at least one.</source>
            <translation>最多 %1：当前上下文可容纳 %2 个词元，且提示词至少占用 1 个。</translation>
        </message>
        <message>
            <source>Load a model to see what a context length costs.</source>
            <translation>加载模型后可查看上下文长度所需的内存。</translation>
        </message>
        <message>
            <source>Auto: the planner picked %1 tokens (KV cache %2).</source>
            <translation>自动：规划器选择了 %1 个词元（KV 缓存 %2）。</translation>
        </message>
        <message>
            <source>VRAM</source>
            <translation>显存</translation>
        </message>
        <message>
            <source>RAM</source>
            <translation>内存</translation>
        </message>
        <message>
            <source>%1 tokens need a %2 KV cache; with the %3 of weights about %4 of %5 (%6 available).</source>
            <translation>%1 个词元需要 %2 的 KV 缓存；加上 %3 的权重，共约 %4 的%5（可用 %6）。</translation>
        </message>
        <message>
            <source>This will not fit.</source>
            <translation>内存不足，无法容纳。</translation>
        </message>
        <message>
            <source>stored: ••••••••</source>
            <translation>已保存：••••••••</translation>
        </message>
        <message>
            <source>none</source>
            <translation>无</translation>
        </message>
        <message>
            <source>keyring unavailable</source>
            <translation>钥匙串不可用</translation>
        </message>
        <message>
            <source>Paste a token first.</source>
            <translation>请先粘贴令牌。</translation>
        </message>
        <message>
            <source>Could not store the token: %1</source>
            <translation>无法保存令牌：%1</translation>
        </message>
        <message>
            <source>Could not remove the token: %1</source>
            <translation>无法删除令牌：%1</translation>
        </message>
        <message>
            <source>Could not create the models folder: %1</source>
            <translation>无法创建模型文件夹：%1</translation>
        </message>
        <message>
            <source>New downloads go to %1. Models already in %2 stay there; import them from Models… → Import if you want to use them.</source>
            <translation>新的下载将保存到 %1。%2 中已有的模型保留在原处；如需使用，请在“模型…”→“导入”中导入它们。</translation>
        </message>
        <message>
            <source>Could not save the download settings: %1</source>
            <translation>无法保存下载设置：%1</translation>
        </message>
    </context>
    <context>
        <name>Startup</name>
        <message>
            <source>it was not a file</source>
            <translation>它不是一个文件</translation>
        </message>
        <message>
            <source>it could not be read</source>
            <translation>无法读取它</translation>
        </message>
        <message>
            <source>it was far too large to be a settings file</source>
            <translation>它太大了，不可能是设置文件</translation>
        </message>
        <message>
            <source>it contained bytes that are not text (they now show as �)</source>
            <translation>其中含有不是文本的字节（现在显示为 �）</translation>
        </message>
        <message>
            <source>it was cut short or damaged</source>
            <translation>它被截断或已损坏</translation>
        </message>
        <message>
            <source>it was damaged (nested far too deep)</source>
            <translation>它已损坏（嵌套层数过深）</translation>
        </message>
        <message>
            <source>it did not contain settings</source>
            <translation>其中没有设置</translation>
        </message>
        <message>
            <source>it was written by a newer version of Ternary Chat</source>
            <translation>它是由更新版本的 Ternary Chat 写入的</translation>
        </message>
        <message>
            <source>Your settings file %1 had a problem: %2.</source>
            <translation>设置文件 %1 有问题：%2。</translation>
        </message>
        <message>
            <source>Your settings file %1 had values that are not valid.</source>
            <translation>设置文件 %1 中有无效的值。</translation>
        </message>
        <message>
            <source>These went back to their defaults: %1.</source>
            <translation>以下设置已恢复为默认值：%1。</translation>
        </message>
        <message>
            <source>Settings the file no longer held were taken from the last good copy (%1).</source>
            <translation>文件中缺失的设置已从上一份完好的副本（%1）中恢复。</translation>
        </message>
        <message>
            <source>Settings the file no longer held are back to their defaults.</source>
            <translation>文件中缺失的设置已恢复为默认值。</translation>
        </message>
        <message>
            <source>Every other setting was kept.</source>
            <translation>其他所有设置均已保留。</translation>
        </message>
        <message>
            <source>The file as it was is kept at %1.</source>
            <translation>文件的原样副本保存在 %1。</translation>
        </message>
        <message>
            <source>No copy of it could be made, so it was left as it is and will not be overwritten.</source>
            <translation>无法为它创建副本，因此它保持原样，不会被覆盖。</translation>
        </message>
        <message>
            <source>Your chat history %1 is damaged and could not be read. It was moved to %2 and kept there; a new history was started.</source>
            <translation>聊天记录 %1 已损坏，无法读取。它已被移到 %2 并保留在那里；已开始新的聊天记录。</translation>
        </message>
        <message>
            <source>Conversations that could still be read were copied into the new history: %1.</source>
            <translation>仍可读取的对话已复制到新的聊天记录中：%1 个。</translation>
        </message>
        <message>
            <source>Your chat history %1 was not a file. It was moved to %2 and kept there; a new history was started.</source>
            <translation>聊天记录 %1 不是文件。它已被移到 %2 并保留在那里；已开始新的聊天记录。</translation>
        </message>
        <message>
            <source>Your chat history %1 was saved by a newer version of Ternary Chat (format %2; this version reads format %3). It was left untouched, so that version will still show every conversation.</source>
            <translation>聊天记录 %1 由更新版本的 Ternary Chat 保存（格式 %2；此版本读取格式 %3）。它保持原样未被改动，因此那个版本仍会显示所有对话。</translation>
        </message>
        <message>
            <source>Chats of this version are kept in %1 meanwhile.</source>
            <translation>在此期间，此版本的对话保存在 %1。</translation>
        </message>
        <message>
            <source>Chats of this session are not saved.</source>
            <translation>本次会话的对话不会被保存。</translation>
        </message>
        <message>
            <source>Your chat history %1 is in use by another program, so chats of this session are not saved. Close that program and start Ternary Chat again.</source>
            <translation>聊天记录 %1 正被另一个程序使用，因此本次会话的对话不会被保存。请关闭那个程序后重新启动 Ternary Chat。</translation>
        </message>
        <message>
            <source>Your chat history was converted to this version's format; a copy of it as it was is kept at %1.</source>
            <translation>聊天记录已转换为此版本的格式；转换前的副本保存在 %1。</translation>
        </message>
        <message>
            <source>Your chat history %1 cannot be opened or written, so chats of this session are not saved.</source>
            <translation>无法打开或写入聊天记录 %1，因此本次会话的对话不会被保存。</translation>
        </message>
        <message>
            <source>%1 was where Ternary Chat needs a folder; it was moved to %2 and kept there.</source>
            <translation>%1 占用了 Ternary Chat 需要的文件夹位置；它已被移到 %2 并保留在那里。</translation>
        </message>
        <message>
            <source>Ternary Chat</source>
            <translation>Ternary Chat 三值聊天</translation>
        </message>
        <message>
            <source>Ternary Chat is already running.</source>
            <translation>Ternary Chat 已在运行。</translation>
        </message>
        <message>
            <source>Its window has been brought to the front.</source>
            <translation>已将它的窗口切换到最前面。</translation>
        </message>
        <message>
            <source>Switch to its window, or close it before starting Ternary Chat again.</source>
            <translation>请切换到它的窗口，或先关闭它再重新启动 Ternary Chat。</translation>
        </message>
        <message>
            <source>Your chat history could not be shown, so chats of this session are not saved. Details are in the log: %1.</source>
            <translation>无法显示聊天记录，因此本次会话的对话不会被保存。详细信息见日志：%1。</translation>
        </message>
    </context>
    <context>
        <name>SummaryProgressDialog</name>
        <message>
            <source>%1 s</source>
            <translation>%1 秒</translation>
        </message>
        <message>
            <source>%1 min %2 s</source>
            <translation>%1 分 %2 秒</translation>
        </message>
        <message>
            <source>%1 h %2 min</source>
            <translation>%1 小时 %2 分</translation>
        </message>
        <message>
            <source>Estimating the time left…</source>
            <translation>正在估算剩余时间…</translation>
        </message>
        <message>
            <source>About %1 left</source>
            <translation>大约还剩 %1</translation>
        </message>
        <message>
            <source>The context (%1 tokens) is too small to summarize: the instructions and a %2-token answer leave only %3 tokens for the text. Choose a longer context in Settings → Hardware.</source>
            <translation>上下文（%1 个词元）太小，无法生成摘要：指令和 %2 个词元的回答只给文本留下 %3 个词元。请在“设置 → 硬件”中选择更长的上下文。</translation>
        </message>
        <message>
            <source>A partial summary (%1 tokens) is too long to combine in this context (room for %2 tokens), so the partial summaries are shown uncombined. Choose a longer context in Settings → Hardware to combine them.</source>
            <translation>某个部分摘要（%1 个词元）太长，无法在此上下文中合并（只有 %2 个词元的空间），因此各部分摘要未经合并直接显示。请在“设置 → 硬件”中选择更长的上下文以合并它们。</translation>
        </message>
        <message>
            <source>Cancel</source>
            <translation>取消</translation>
        </message>
        <message>
            <source>Cancel summarizing (what is done is kept)</source>
            <translation>取消生成摘要（已完成的部分会保留）</translation>
        </message>
        <message>
            <source>Summarizing</source>
            <translation>正在生成摘要</translation>
        </message>
        <message>
            <source>Summarizing progress</source>
            <translation>摘要进度</translation>
        </message>
        <message>
            <source>Summarizing %1…</source>
            <translation>正在为 %1 生成摘要…</translation>
        </message>
        <message>
            <source>reading the parts</source>
            <translation>逐段阅读</translation>
        </message>
        <message>
            <source>combining the summaries</source>
            <translation>合并摘要</translation>
        </message>
        <message>
            <source>Summarizing %1: step %2 of about %3 (%4)</source>
            <translation>正在为 %1 生成摘要：第 %2 步，共约 %3 步（%4）</translation>
        </message>
    </context>
    <context>
        <name>WelcomePage</name>
        <message>
            <source>Welcome to Ternary Chat</source>
            <translation>欢迎使用 Ternary Chat</translation>
        </message>
        <message>
            <source>Private chat with ternary Bonsai models, running entirely on this computer.</source>
            <translation>与三值 Bonsai 模型私密聊天，完全在本机运行。</translation>
        </message>
        <message>
            <source>Checking this computer's hardware…</source>
            <translation>正在检测本机硬件…</translation>
        </message>
        <message>
            <source>Detected hardware</source>
            <translation>检测到的硬件</translation>
        </message>
        <message>
            <source>Recommended model</source>
            <translation>推荐模型</translation>
        </message>
        <message>
            <source>Download and start chatting</source>
            <translation>下载并开始聊天</translation>
        </message>
        <message>
            <source>Download the recommended model and start chatting</source>
            <translation>下载推荐的模型并开始聊天</translation>
        </message>
        <message>
            <source>Choose another model or import one…</source>
            <translation>选择其他模型或导入模型…</translation>
        </message>
        <message>
            <source>Open the model manager</source>
            <translation>打开模型管理器</translation>
        </message>
        <message>
            <source>Download problem</source>
            <translation>下载问题</translation>
        </message>
        <message>
            <source>Retry</source>
            <translation>重试</translation>
        </message>
        <message>
            <source>Use a mirror…</source>
            <translation>使用镜像…</translation>
        </message>
        <message>
            <source>Download from another hub or a mirror</source>
            <translation>从其他模型中心或镜像下载</translation>
        </message>
        <message>
            <source>Import a file you already have…</source>
            <translation>导入已有的文件…</translation>
        </message>
        <message>
            <source>Import a model file from this computer</source>
            <translation>从此电脑导入模型文件</translation>
        </message>
        <message>
            <source>GPU: %1 (%2 free of %3) · RAM: %4 available of %5</source>
            <translation>GPU：%1（%3 中空闲 %2）· 内存：%5 中可用 %4</translation>
        </message>
        <message>
            <source>No supported GPU found: models run on the CPU (%1) · RAM: %2 available of %3</source>
            <translation>未找到受支持的 GPU：模型将在 CPU（%1）上运行 · 内存：%3 中可用 %2</translation>
        </message>
        <message>
            <source>%1 model(s) already on this computer: pick one in the model picker above.</source>
            <translation>本机已有 %1 个模型：请在上方的模型选择器中选择。</translation>
        </message>
        <message>
            <source>The model catalog could not be read: %1</source>
            <translation>无法读取模型目录：%1</translation>
        </message>
        <message>
            <source>None of the catalog models fits this computer's free memory. Close other programs or import a smaller model.</source>
            <translation>目录中没有适合本机空闲内存的模型。请关闭其他程序或导入更小的模型。</translation>
        </message>
        <message>
            <source>on the GPU</source>
            <translation>在 GPU 上</translation>
        </message>
        <message>
            <source>on the CPU</source>
            <translation>在 CPU 上</translation>
        </message>
        <message>
            <source>Recommended for this computer: %1 (%2, %3 download), runs %4.</source>
            <translation>本机推荐：%1（%2，下载 %3），%4运行。</translation>
        </message>
        <message>
            <source>The download of %1 failed: %2.</source>
            <translation>%1 下载失败：%2。</translation>
        </message>
        <message>
            <source>Retry (resumes)</source>
            <translation>重试（继续下载）</translation>
        </message>
        <message>
            <source>Retry the download; it continues where it stopped</source>
            <translation>重试下载；将从中断处继续</translation>
        </message>
        <message>
            <source>Retry the download</source>
            <translation>重试下载</translation>
        </message>
        <message>
            <source>Downloads now come from %1: press Retry.</source>
            <translation>现在将从 %1 下载：请点击“重试”。</translation>
        </message>
        <message>
            <source>Import a model file</source>
            <translation>导入模型文件</translation>
        </message>
        <message>
            <source>Models (*.gguf *.ternary)</source>
            <translation>模型 (*.gguf *.ternary)</translation>
        </message>
    </context>
</TS>
