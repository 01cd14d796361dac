// opsbot sandbox: a small Slack-like client for the emulator. No framework, no build step.
// It polls /ui/state (cheap while nothing changes) and POSTs what the person does.
"use strict";

const $ = (id) => document.getElementById(id);
const ui = {
  state: null,
  version: -1,
  user: null,
  conversation: null, // channel id, or "home"
  thread: null, // ts of the open thread's parent
  modalKey: null,
  openedTab: null,
  seen: {}, // channel id → ts of the newest message the person has seen there
  shown: { messages: "", thread: "" }, // what each pane showed last, to scroll on news
};

// Text symbols rather than emoji: they render without an emoji font (headless Chromium too).
const EMOJI = {
  white_check_mark: "✔", heavy_check_mark: "✔", x: "✖", warning: "⚠", hourglass: "◔",
  hourglass_flowing_sand: "◔", no_entry_sign: "⊘", no_entry: "⊘", information_source: "ℹ",
  pencil2: "✎", lock: "🔒", tada: "★", mag: "⌕", robot_face: "☺", link: "⛓", eyes: "◉",
  white_circle: "○",
};

// -- text ---------------------------------------------------------------------------------

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function unslack(text) {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

function userName(id) {
  const user = (ui.state?.users || []).find((u) => u.id === id);
  return user ? user.name : id;
}

function channelName(id) {
  const channel = (ui.state?.channels || []).find((c) => c.id === id);
  return channel ? channel.name : id;
}

function safeUrl(url) {
  return /^(https?:|mailto:)/i.test(url) ? url : null;
}

function control(inner) {
  const [target, label] = inner.split("|", 2);
  if (target.startsWith("@")) return `<span class="mention">@${esc(label || userName(target.slice(1)))}</span>`;
  if (target.startsWith("#")) return `<span class="mention">#${esc(label || channelName(target.slice(1)))}</span>`;
  if (target.startsWith("!date^")) {
    const stamp = Number(target.split("^")[1]);
    return esc(Number.isFinite(stamp) ? new Date(stamp * 1000).toLocaleString() : unslack(label || ""));
  }
  if (target.startsWith("!")) return `<span class="mention">@${esc(target.slice(1))}</span>`;
  const url = safeUrl(unslack(target));
  if (url) return `<a href="${esc(url)}" target="_blank" rel="noopener">${esc(unslack(label || target))}</a>`;
  return esc(unslack(inner));
}

function format(text) {
  const codes = [];
  let out = esc(unslack(text)).replace(/`([^`\n]+)`/g, (_m, code) => {
    codes.push(code);
    return `\u0000${codes.length - 1}\u0000`;
  });
  const edge = "(^|[\\s(\\u0000>])";
  const end = "(?=$|[\\s).,:;!?\\u0000<])";
  out = out.replace(new RegExp(`${edge}\\*([^*\\n]+)\\*${end}`, "g"), "$1<b>$2</b>");
  out = out.replace(new RegExp(`${edge}_([^_\\n]+)_${end}`, "g"), "$1<i>$2</i>");
  out = out.replace(new RegExp(`${edge}~([^~\\n]+)~${end}`, "g"), "$1<s>$2</s>");
  out = out.replace(/:([a-z0-9_+-]+):/g, (m, name) => EMOJI[name] || m);
  out = out.replace(/\u0000(\d+)\u0000/g, (_m, i) => `<code>${codes[Number(i)]}</code>`);
  return out.replace(/\n/g, "<br>");
}

function inline(text) {
  let out = "";
  let last = 0;
  const re = /<([^<>\n]+)>/g;
  let match;
  while ((match = re.exec(text)) !== null) {
    out += format(text.slice(last, match.index)) + control(match[1]);
    last = re.lastIndex;
  }
  return out + format(text.slice(last));
}

function mrkdwn(text) {
  return String(text || "").split("```").map((part, i) => (
    i % 2 ? `<pre>${esc(unslack(part.replace(/^\n/, "")))}</pre>` : inline(part))).join("");
}

function textObject(obj) {
  if (!obj) return "";
  return obj.type === "mrkdwn" ? mrkdwn(obj.text) : format(obj.text.replace(/[&<>]/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;" }[c])));
}

// -- Block Kit ------------------------------------------------------------------------------

function button(element, where, bi, ei) {
  const style = element.style ? ` ${element.style}` : "";
  const data = `data-where="${esc(where)}" data-block="${bi}" data-element="${ei}"`;
  const label = esc(element.text?.text || "Button");
  if (element.url && safeUrl(element.url)) {
    return `<a class="bk-button${style}" href="${esc(element.url)}" target="_blank" rel="noopener" ${data}>${label}</a>`;
  }
  return `<button type="button" class="bk-button${style}" ${data}>${label}</button>`;
}

function renderBlocks(blocks, where) {
  return (blocks || []).map((block, bi) => {
    switch (block.type) {
      case "header":
        return `<div class="bk-header">${esc(block.text?.text || "")}</div>`;
      case "section": {
        const fields = block.fields
          ? `<div class="bk-fields">${block.fields.map((f) => `<div>${textObject(f)}</div>`).join("")}</div>`
          : "";
        const accessory = block.accessory?.type === "button" ? button(block.accessory, where, bi, -1) : "";
        return `<div class="bk-section"><div class="text">${textObject(block.text)}${fields}</div>${accessory}</div>`;
      }
      case "context":
        return `<div class="bk-context">${(block.elements || []).map((e) => (
          e.type === "image" ? `<img src="${esc(e.image_url)}" alt="${esc(e.alt_text || "")}">` : `<span>${textObject(e)}</span>`
        )).join("")}</div>`;
      case "divider":
        return '<hr class="bk-divider">';
      case "image":
        return `<img class="bk-image" src="${esc(block.image_url)}" alt="${esc(block.alt_text || "")}">`;
      case "actions":
        return `<div class="bk-actions">${(block.elements || []).map((e, ei) => (
          e.type === "button" ? button(e, where, bi, ei) : `<span class="bk-unknown">[${esc(e.type)}]</span>`
        )).join("")}</div>`;
      case "input":
        return renderInput(block, bi);
      case "context_actions":
        return `<div class="bk-context-actions">${(block.elements || []).map((e, ei) => (
          e.type === "feedback_buttons" ? ["positive", "negative"].map((choice) => {
            const b = e[`${choice}_button`] || {};
            return `<button type="button" class="bk-feedback" data-where="${esc(where)}" data-block="${bi}" data-element="${ei}" data-choice="${choice}" aria-label="${esc(b.accessibility_label || choice)}">${choice === "positive" ? "👍" : "👎"} ${esc(b.text?.text || "")}</button>`;
          }).join("") : `<span class="bk-unknown">[${esc(e.type)}]</span>`)).join("")}</div>`;
      case "alert": {
        const level = ["info", "warning", "error", "success"].includes(block.level) ? block.level : "default";
        return `<div class="bk-alert ${level}" role="note">${textObject(block.text)}</div>`;
      }
      case "auth_provider": {
        const url = block.auth_url && safeUrl(block.auth_url);
        const action = block.is_connected ? '<span class="connected">Connected</span>'
          : url ? `<a class="bk-button primary" href="${esc(url)}" target="_blank" rel="noopener">Connect</a>` : "";
        const about = block.is_connected ? "" : `<div class="about">${textObject(block.description)}</div>`;
        return `<div class="bk-auth-provider"><div><b>${textObject(block.name)}</b>${about}</div>${action}</div>`;
      }
      default:
        return `<div class="bk-unknown">[unsupported block: ${esc(block.type)}]</div>`;
    }
  }).join("");
}

function blockId(block, index) {
  return block.block_id || `b${index}`;
}

function renderInput(block, index) {
  const id = blockId(block, index);
  const el = block.element || {};
  const name = `input-${esc(id)}`;
  let field;
  if (el.type === "static_select") {
    const initial = el.initial_option?.value;
    const options = (el.options || []).map((o) => (
      `<option value="${esc(o.value)}"${o.value === initial ? " selected" : ""}>${esc(o.text?.text || o.value)}</option>`));
    field = `<select id="${name}" data-block-id="${esc(id)}"><option value="">Select…</option>${options.join("")}</select>`;
  } else if (el.type === "number_input") {
    const step = el.is_decimal_allowed ? "any" : "1";
    field = `<input id="${name}" type="number" step="${step}" data-block-id="${esc(id)}" value="${esc(el.initial_value ?? "")}">`;
  } else if (el.type === "plain_text_input" && el.multiline) {
    field = `<textarea id="${name}" rows="3" data-block-id="${esc(id)}"${el.max_length ? ` maxlength="${el.max_length}"` : ""}>${esc(el.initial_value ?? "")}</textarea>`;
  } else {
    field = `<input id="${name}" type="text" data-block-id="${esc(id)}" value="${esc(el.initial_value ?? "")}"${el.max_length ? ` maxlength="${el.max_length}"` : ""}>`;
  }
  const optional = block.optional ? ' <span class="optional">(optional)</span>' : "";
  const hint = block.hint ? `<div class="bk-hint">${esc(block.hint.text)}</div>` : "";
  return `<div class="bk-input" data-input="${esc(id)}"><label for="${name}">${esc(block.label?.text || id)}${optional}</label>${field}${hint}<div class="bk-error" role="alert"></div></div>`;
}

// -- messages -------------------------------------------------------------------------------

function messageHtml(m, where, inThread) {
  const bot = m.user === ui.state.bot.id || m.user === "USLACKBOT";
  const name = m.user === "USLACKBOT" ? "Slackbot" : userName(m.user);
  const time = new Date(Number(m.ts) * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const body = m.stream ? streamHtml(m, where) : m.blocks && m.blocks.length ? renderBlocks(m.blocks, where) : mrkdwn(m.text);
  const replies = inThread ? 0 : ui.state.messages.filter((r) => r.thread_ts === m.ts && r.ts !== m.ts && r.channel === m.channel).length;
  const replyLink = replies ? `<button type="button" class="replies" data-thread="${esc(m.ts)}">${replies} ${replies === 1 ? "reply" : "replies"}</button>` : "";
  return `<div class="message${m.ephemeral ? " ephemeral" : ""}" data-ts="${esc(m.ts)}" data-user="${esc(name)}">
    <div class="avatar${bot ? " bot" : ""}">${esc(name.slice(0, 1).toUpperCase())}</div>
    <div class="body"><div class="meta"><span class="name">${esc(name)}</span>${bot ? '<span class="app">APP</span> ' : ""}${time}${m.edited ? " (edited)" : ""}</div>
    ${m.ephemeral ? '<div class="only-you">Only visible to you</div>' : ""}
    <div class="content">${body}</div>${replyLink}</div></div>`;
}

// A streamed answer: its task entries (one per tool call), then the text so far; the blocks
// sent with chat.stopStream (sources, feedback) come last.
const TASK_ICON = { pending: "○", in_progress: "◔", complete: "✔", error: "✖" };
function streamHtml(m, where) {
  const st = m.stream;
  const plan = st.plan ? `<div class="plan">${esc(st.plan)}</div>` : "";
  const tasks = st.tasks.length ? `<ul class="tasks">${st.tasks.map((t) => (
    `<li class="task ${esc(t.status)}" data-status="${esc(t.status)}"><span class="icon">${TASK_ICON[t.status] || "○"}</span> ${esc(t.title || t.id)}${
      t.details ? ` <span class="details">${esc(t.details)}</span>` : ""}</li>`)).join("")}</ul>` : "";
  // markdown_text is Markdown: bold and links become their mrkdwn forms
  const md = st.text.replace(/\*\*([^*\n]+)\*\*/g, "*$1*").replace(/\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g, "<$2|$1>");
  const text = st.text ? `<div class="stream-text">${mrkdwn(md)}</div>` : "";
  const more = m.blocks && m.blocks.length ? renderBlocks(m.blocks, where) : "";
  const typing = st.open ? '<div class="streaming" aria-label="streaming">…</div>' : "";
  return `<div class="stream${st.open ? " open" : ""}">${plan}${tasks}${text}${more}${typing}</div>`;
}

// The newest ts among messages of a channel (top level and replies) from someone else.
function newestFromOthers(channel) {
  return ui.state.messages.filter((m) => m.channel === channel && m.user !== ui.state.me)
    .reduce((newest, m) => (Number(m.ts) > Number(newest) ? m.ts : newest), "0");
}

function unreadCount(channel) {
  const seen = Number(ui.seen[channel] || 0);
  return ui.state.messages.filter((m) => m.channel === channel && m.user !== ui.state.me && Number(m.ts) > seen).length;
}

// Scroll a pane to its end when it shows something new (not on every poll).
function scrollOnNews(pane, key, html) {
  const el = $(pane);
  if (ui.shown[key] !== html) {
    ui.shown[key] = html;
    el.scrollTop = el.scrollHeight;
  }
}

function render() {
  const s = ui.state;
  const me = s.users.find((u) => u.id === s.me);
  $("me-groups").textContent = me ? `${me.real_name} · ${me.groups.join(", ") || "no groups"}` : "";
  const channels = s.channels.filter((c) => !c.is_im);
  const dm = s.channels.find((c) => c.is_im);
  if (!ui.conversation || (ui.conversation !== "home" && !s.channels.some((c) => c.id === ui.conversation))) {
    ui.conversation = channels[0]?.id;
  }
  if (ui.conversation && ui.conversation !== "home") ui.seen[ui.conversation] = newestFromOthers(ui.conversation);
  for (const c of s.channels) if (!(c.id in ui.seen)) ui.seen[c.id] = newestFromOthers(c.id); // history is read
  const badge = (id) => {
    const n = id === ui.conversation ? 0 : unreadCount(id);
    return n ? ` <span class="badge" data-unread="${n}">${n}</span>` : "";
  };
  const link = (id, label, testid) => `<li><a href="#" data-conversation="${esc(id)}" data-name="${esc(testid)}" class="${ui.conversation === id ? "active" : ""}${id !== "home" && id !== ui.conversation && unreadCount(id) ? " unread" : ""}">${label}${id === "home" ? "" : badge(id)}</a></li>`;
  $("channel-list").innerHTML = channels.map((c) => link(c.id, `# ${esc(c.name)}`, c.name)).join("");
  $("dm-list").innerHTML = dm ? link(dm.id, `● ${esc(s.bot.name)}`, "dm") : "";
  $("app-list").innerHTML = link("home", `${esc(s.bot.name)} · Home`, "home");

  const home = ui.conversation === "home";
  $("composer").hidden = home;
  $("conversation-title").textContent = home ? `${s.bot.name} · Home`
    : ui.conversation === dm?.id ? `${s.bot.name} (direct message)` : `# ${channelName(ui.conversation)}`;
  $("composer-text").placeholder = home ? "" : ui.conversation === dm?.id
    ? `Message ${s.bot.name} (or /ops help)` : `Message #${channelName(ui.conversation)} — mention @${s.bot.name} to ask`;
  if (home) {
    $("messages").innerHTML = s.home ? `<div class="message"><div class="body">${renderBlocks(s.home.blocks, "home")}</div></div>`
      : '<p class="status">Loading Home…</p>';
    $("prompts").innerHTML = "";
  } else {
    const top = s.messages.filter((m) => m.channel === ui.conversation && (!m.thread_ts || m.thread_ts === m.ts));
    const html = top.map((m) => messageHtml(m, `${m.channel}/${m.ts}`, false)).join("");
    $("messages").innerHTML = html;
    scrollOnNews("messages", "messages", `${ui.conversation}:${html}`);
    const prompts = s.prompts[ui.conversation];
    $("prompts").innerHTML = prompts ? prompts.prompts.map((p) => (
      `<button type="button" data-prompt="${esc(p.message)}" title="${esc(p.message)}">${esc(p.title)}</button>`)).join("") : "";
  }
  renderThread();
  renderModal();
}

function renderThread() {
  const s = ui.state;
  const parent = ui.thread && s.messages.find((m) => m.channel === ui.conversation && m.ts === ui.thread);
  $("thread").hidden = !parent;
  if (!parent) return;
  const replies = s.messages.filter((m) => m.channel === parent.channel && m.thread_ts === parent.ts && m.ts !== parent.ts);
  const html = [parent, ...replies].map((m) => messageHtml(m, `${m.channel}/${m.ts}`, true)).join("");
  $("thread-messages").innerHTML = html;
  scrollOnNews("thread-messages", "thread", `${parent.ts}:${html}`);
  const title = (s.titles || []).find((x) => x.channel === parent.channel && x.thread_ts === parent.ts);
  $("thread-title").textContent = title ? title.title : "Thread";
  const status = s.statuses.find((x) => x.channel === parent.channel && x.thread_ts === parent.ts);
  const session = (s.sessions || []).find((x) => x.channel === parent.channel && x.thread_ts === parent.ts);
  // Slack shows Stop while processing; the sandbox also while suspended (awaiting approval)
  const running = session && ["processing", "suspended"].includes(session.status);
  const words = [status ? `${s.bot.name} ${status.status}` : "", session ? `session ${session.status}` : ""].filter(Boolean);
  const statusHtml = esc(words.join(" · ")) + (running
    ? ` <button type="button" class="stop" data-stop="${esc(parent.ts)}" data-channel="${esc(parent.channel)}">Stop</button>` : "");
  // rewritten only when it changes: a poll must not replace the button under the pointer
  if ($("thread-status").innerHTML !== statusHtml) $("thread-status").innerHTML = statusHtml;
}

function renderModal() {
  const modal = ui.state.modal;
  $("modal-backdrop").hidden = !modal;
  if (!modal) {
    ui.modalKey = null;
    return;
  }
  const key = `${modal.id}:${JSON.stringify(modal.view)}`;
  if (key !== ui.modalKey) {
    ui.modalKey = key;
    const v = modal.view;
    const submit = v.submit ? `<button type="submit" class="submit">${esc(v.submit.text)}</button>` : "";
    $("modal").innerHTML = `<h2>${esc(v.title?.text || "")}</h2><div class="content">${renderBlocks(v.blocks, "modal")}</div>
      <div class="buttons"><button type="button" class="cancel">${esc(v.close?.text || "Cancel")}</button>${submit}</div>`;
  }
  document.querySelectorAll("#modal .bk-input").forEach((box) => {
    const error = modal.errors[box.dataset.input] || "";
    box.classList.toggle("has-error", Boolean(error));
    box.querySelector(".bk-error").textContent = error;
  });
  const submitButton = document.querySelector("#modal .submit");
  if (submitButton) submitButton.disabled = modal.busy;
}

// -- talking to the emulator ----------------------------------------------------------------

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user: ui.user, ...body }),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) toast(data.error || `HTTP ${response.status}`);
  poll(true);
  return data;
}

let polling = false;
async function poll(force) {
  if (polling && !force) return;
  polling = true;
  try {
    const since = force ? "" : `&since=${ui.version}`;
    const response = await fetch(`/ui/state?user=${encodeURIComponent(ui.user)}${since}`);
    const data = await response.json();
    if (data.me && data.version >= ui.version) {
      ui.state = data;
      ui.version = data.version;
      render();
    }
  } catch (error) {
    toast("the sandbox is not answering");
  } finally {
    polling = false;
  }
}

function toast(text) {
  $("toast").textContent = text;
  $("toast").hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { $("toast").hidden = true; }, 4000);
}

function elementAt(where, bi, ei) {
  let blocks;
  if (where === "home") blocks = ui.state.home?.blocks;
  else if (where === "modal") blocks = ui.state.modal?.view.blocks;
  else {
    const [channel, ts] = where.split("/");
    blocks = ui.state.messages.find((m) => m.channel === channel && m.ts === ts)?.blocks;
  }
  const block = (blocks || [])[bi];
  return block && (ei < 0 ? block.accessory : block.elements[ei]);
}

function click(where, bi, ei, choice) {
  const body = { block: bi, element: ei };
  if (choice) body.choice = choice;
  if (where === "home") body.home = true;
  else [body.channel, body.ts] = where.split("/");
  return post("/ui/click", body);
}

function confirmThen(confirm, action) {
  const box = $("confirm");
  box.innerHTML = `<h2>${esc(confirm.title?.text || "Are you sure?")}</h2><div class="content">${textObject(confirm.text)}</div>
    <div class="buttons"><button type="button" class="deny">${esc(confirm.deny?.text || "Cancel")}</button>
    <button type="button" class="${confirm.style === "danger" ? "danger" : "submit"} ok">${esc(confirm.confirm?.text || "Yes")}</button></div>`;
  $("confirm-backdrop").hidden = false;
  box.querySelector(".deny").onclick = () => { $("confirm-backdrop").hidden = true; };
  box.querySelector(".ok").onclick = () => { $("confirm-backdrop").hidden = true; action(); };
}

function selectConversation(id) {
  ui.conversation = id;
  ui.thread = null;
  if (id === "home") post("/ui/home", { tab: "home" });
  else if (ui.state.channels.some((c) => c.id === id && c.is_im) && ui.openedTab !== `${ui.user}:${id}`) {
    ui.openedTab = `${ui.user}:${id}`;
    post("/ui/home", { tab: "messages" });
  }
  render();
}

function send(textarea, threadTs) {
  const text = textarea.value.trim();
  if (!text || ui.conversation === "home") return;
  textarea.value = "";
  post("/ui/say", { channel: ui.conversation, text, thread_ts: threadTs || "" });
}

// -- events ----------------------------------------------------------------------------------

document.addEventListener("click", (event) => {
  const target = event.target.closest("[data-conversation], [data-thread], [data-where], [data-prompt], [data-stop]");
  if (!target) return;
  if (target.dataset.stop) {
    post("/ui/stop", { channel: target.dataset.channel, thread_ts: target.dataset.stop });
  } else if (target.dataset.conversation) {
    event.preventDefault();
    selectConversation(target.dataset.conversation);
  } else if (target.dataset.thread) {
    ui.thread = target.dataset.thread;
    render();
  } else if (target.dataset.prompt) {
    $("composer-text").value = target.dataset.prompt;
    $("composer-text").focus();
  } else if (target.dataset.where) {
    const { where } = target.dataset;
    const bi = Number(target.dataset.block);
    const ei = Number(target.dataset.element);
    const element = elementAt(where, bi, ei);
    if (!element) return;
    if (target.dataset.choice) {
      event.preventDefault();
      target.classList.add("chosen");
      click(where, bi, ei, target.dataset.choice);
      return;
    }
    if (element.url) { click(where, bi, ei); return; } // the browser follows the link
    event.preventDefault();
    if (element.confirm) confirmThen(element.confirm, () => click(where, bi, ei));
    else click(where, bi, ei);
  }
});

$("composer").addEventListener("submit", (event) => { event.preventDefault(); send($("composer-text")); });
$("thread-composer").addEventListener("submit", (event) => { event.preventDefault(); send($("thread-text"), ui.thread); });
for (const id of ["composer-text", "thread-text"]) {
  $(id).addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $(id).form.requestSubmit();
    }
  });
}
$("thread-close").addEventListener("click", () => { ui.thread = null; render(); });

$("modal").addEventListener("submit", (event) => {
  event.preventDefault();
  const values = {};
  document.querySelectorAll("#modal [data-block-id]").forEach((field) => { values[field.dataset.blockId] = field.value; });
  post("/ui/submit", { view_id: ui.state.modal.id, values });
});
$("modal").addEventListener("click", (event) => {
  if (event.target.classList.contains("cancel")) post("/ui/close", { view_id: ui.state.modal.id });
});

$("user-switcher").addEventListener("change", (event) => {
  ui.user = event.target.value;
  ui.thread = null;
  ui.openedTab = null;
  localStorage.setItem("opsbot-sandbox-user", ui.user);
  const url = new URL(location.href);
  url.searchParams.set("user", userName(ui.user));
  history.replaceState(null, "", url);
  if (ui.conversation !== "home" && ui.state.channels.some((c) => c.id === ui.conversation && c.is_im)) ui.conversation = null;
  poll(true).then(() => { if (ui.conversation === "home") post("/ui/home", { tab: "home" }); });
});

async function start() {
  const humans = (await (await fetch("/ui/users")).json().catch(() => ({}))).users || [];
  const wanted = new URL(location.href).searchParams.get("user") || localStorage.getItem("opsbot-sandbox-user");
  const chosen = humans.find((u) => u.name === wanted || u.id === wanted) || humans[0];
  ui.user = chosen ? chosen.id : "";
  $("user-switcher").innerHTML = humans.map((u) => (
    `<option value="${esc(u.id)}"${u.id === ui.user ? " selected" : ""}>${esc(u.real_name)} (${esc(u.name)})</option>`)).join("");
  await poll(true);
  setInterval(() => poll(false), 400);
}

start();
