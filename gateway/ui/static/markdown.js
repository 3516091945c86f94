// A small Markdown subset rendered into DOM nodes. Model text is untrusted, so nothing here
// parses HTML: every piece of text becomes a Text node, tags come only from the list below,
// and a link keeps its target only when it is an absolute http(s) URL.
//
// Blocks: paragraphs (a single newline is a line break), ATX headings, fenced code (``` or ~~~;
// an unclosed fence runs to the end, as while an answer streams), bullet and numbered lists
// (nested by indentation), block quotes, horizontal rules.
// Inline: `code`, **strong** / __strong__, *emphasis* / _emphasis_, [label](http://…).

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const BLANK = /^\s*$/;
const INLINE = new RegExp([
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source,                  // 1, 2: code span
  /\*\*(?=\S)([\s\S]*?\S)\*\*|(?<!\w)__(?=\S)([\s\S]*?\S)__(?!\w)/.source,  // 3, 4: strong
  /\*(?=[^\s*])([\s\S]*?[^\s*])\*|(?<!\w)_(?=\S)([\s\S]*?\S)_(?!\w)/.source,  // 5, 6: emphasis
  /\[([^\]\n]+)\]\(\s*([^()\s]+)\s*\)/.source,                    // 7, 8: link
  /\n/.source,                                                   // line break
].join("|"), "g");

function element(tag, ...children) {
  const node = document.createElement(tag);
  node.append(...children);
  return node;
}

const indentOf = (line) => line.length - line.trimStart().length;

// The absolute http(s) URL `text` names, or null.
export function safeUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

// Inline markup of `text` → an array of nodes (strings are appended as Text nodes).
function inline(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    out.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[2] !== undefined) {
      out.push(element("code", m[2]));
    } else if (m[3] !== undefined || m[4] !== undefined) {
      out.push(element("strong", ...inline(m[3] ?? m[4])));
    } else if (m[5] !== undefined || m[6] !== undefined) {
      out.push(element("em", ...inline(m[5] ?? m[6])));
    } else if (m[7] !== undefined) {
      const href = safeUrl(m[8]);
      if (href === null) {
        out.push(m[0]);
      } else {
        const link = element("a", ...inline(m[7]));
        link.href = href;
        link.rel = "noopener noreferrer";
        link.target = "_blank";
        out.push(link);
      }
    } else {
      out.push(element("br"));
    }
  }
  out.push(text.slice(last));
  return out.filter((part) => part !== "");
}

function codeBlock(lines, fence, language, i) {
  const body = [];
  const closing = new RegExp(`^ {0,3}${fence[0] === "`" ? "`" : "~"}{${fence.length},}\\s*$`);
  while (i < lines.length && !closing.test(lines[i])) body.push(lines[i++]);
  const code = element("code", body.join("\n"));
  if (language) code.className = `language-${language}`;
  return [element("pre", code), i + 1];
}

function quote(lines, i) {
  const inner = [];
  for (let m; i < lines.length && (m = QUOTE.exec(lines[i])); i++) inner.push(m[1]);
  return [element("blockquote", blocks(inner)), i];
}

function list(lines, i) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = document.createElement(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const contentIndent = indent + m[2].length + 1;
    const body = [m[3]];
    for (i++; i < lines.length; i++) {
      const line = lines[i];
      if (BLANK.test(line)) {
        // a blank line stays inside the item only when the item goes on after it
        if (i + 1 < lines.length && indentOf(lines[i + 1]) > indent) body.push("");
        else break;
      } else if (indentOf(line) > indent) {
        body.push(line.slice(Math.min(indentOf(line), contentIndent)));
      } else {
        break;
      }
    }
    node.append(element("li", blocks(body)));
    if (i + 1 < lines.length && BLANK.test(lines[i]) && ITEM.test(lines[i + 1])) i++;
  }
  return [node, i];
}

// Does `line` start a block other than a paragraph?
const startsBlock = (line) =>
  FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);

function paragraph(lines, i) {
  const text = [lines[i++]];
  while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i])) text.push(lines[i++]);
  return [element("p", ...inline(text.map((line) => line.trim()).join("\n"))), i];
}

function blocks(lines) {
  const out = document.createDocumentFragment();
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m, node;
    if (BLANK.test(line)) {
      i++;
      continue;
    }
    if ((m = FENCE.exec(line))) {
      [node, i] = codeBlock(lines, m[1], m[2], i + 1);
    } else if ((m = HEADING.exec(line))) {
      [node, i] = [element(`h${m[1].length}`, ...inline(m[2])), i + 1];
    } else if (RULE.test(line)) {
      [node, i] = [document.createElement("hr"), i + 1];
    } else if (QUOTE.test(line)) {
      [node, i] = quote(lines, i);
    } else if (ITEM.test(line)) {
      [node, i] = list(lines, i);
    } else {
      [node, i] = paragraph(lines, i);
    }
    out.append(node);
  }
  return out;
}

// Markdown text → a DocumentFragment of the subset above.
export function renderMarkdown(text) {
  return blocks(String(text).replace(/\r\n?/g, "\n").split("\n"));
}
