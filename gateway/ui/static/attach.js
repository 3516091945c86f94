// Images attached to the message being composed (models with the `vision` capability only): the file
// picker, paste and drag-and-drop add them, each shown as a preview with a remove button. They leave as
// data: URIs, the form the server takes and the conversation keeps in localStorage. That storage holds a
// few MB per origin, so a file above KEEP_BYTES is redrawn on a canvas (longest side ≤ MAX_EDGE_PX,
// JPEG) and one still above REFUSE_BYTES is refused. A smaller file goes as it is, unread by the page:
// the server decodes it and its error (a corrupt file, too many pixels) is the one the user sees.

export const TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];
const KEEP_BYTES = 300 * 1024;
const REFUSE_BYTES = 600 * 1024;
const MAX_EDGE_PX = 1024;
const JPEG_QUALITY = 0.85;

function readDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

// A large file, decoded by the browser and redrawn smaller as a JPEG data: URI.
async function downscaled(file) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch {
    throw new Error(`“${file.name}” could not be read as an image.`);
  }
  const scale = Math.min(1, MAX_EDGE_PX / Math.max(bitmap.width, bitmap.height));
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, Math.round(bitmap.width * scale));
  canvas.height = Math.max(1, Math.round(bitmap.height * scale));
  canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", JPEG_QUALITY));
  if (!blob || blob.size > REFUSE_BYTES) {
    throw new Error(`“${file.name}” is too large to keep in this browser, even reduced to ${MAX_EDGE_PX} px.`);
  }
  return readDataUrl(blob);
}

// The data: URI a file is sent as.
export async function imageDataUrl(file) {
  if (!TYPES.includes(file.type)) throw new Error(`“${file.name}” is not a PNG, JPEG, WebP or GIF image.`);
  return file.size <= KEEP_BYTES ? readDataUrl(file) : downscaled(file);
}

// The composer's attachments. els: {button, input, previews, prompt, dropZone}; onError(message).
export function attachments(els, onError) {
  let urls = [];
  let enabled = false;

  function show() {
    els.previews.replaceChildren(...urls.map((url, k) => {
      const img = document.createElement("img");
      img.src = url;
      img.alt = `attached image ${k + 1}`;
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "remove";
      remove.textContent = "×";
      remove.title = `Remove image ${k + 1}`;
      remove.setAttribute("aria-label", remove.title);
      remove.addEventListener("click", () => {
        urls = urls.filter((_, j) => j !== k);
        show();
      });
      const figure = document.createElement("figure");
      figure.append(img, remove);
      return figure;
    }));
    els.previews.hidden = urls.length === 0;
  }

  async function add(files) {
    for (const file of files) {
      try {
        urls.push(await imageDataUrl(file));
      } catch (error) {
        onError(error.message);
      }
    }
    show();
  }

  els.button.addEventListener("click", () => els.input.click());
  els.input.addEventListener("change", () => {
    const files = [...els.input.files];
    els.input.value = ""; // the same file may be picked again
    add(files);
  });
  els.prompt.addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (!enabled || files.length === 0) return;
    event.preventDefault();
    add(files);
  });
  els.dropZone.addEventListener("dragover", (event) => {
    if (enabled && event.dataTransfer?.types.includes("Files")) event.preventDefault();
  });
  els.dropZone.addEventListener("drop", (event) => {
    if (!enabled || !event.dataTransfer?.files.length) return;
    event.preventDefault();
    add([...event.dataTransfer.files]);
  });

  return {
    // The images to send with the next message (data: URIs), emptied for the next one.
    take() {
      const out = urls;
      urls = [];
      show();
      return out;
    },
    count: () => urls.length,
    // Shown for models with the vision capability; hiding drops what was attached.
    setEnabled(on) {
      enabled = on;
      els.button.hidden = !on;
      els.input.disabled = !on;
      if (!on && urls.length) this.take();
    },
  };
}
