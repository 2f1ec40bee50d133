// measure.mjs holds what the browser tests measure a page's readability
// with: cells, inputs and menus, and the timeline's axis labels.

// measure lists what a person could not read on the page as it is now.
export function measure(page, root) {
  return page.evaluate((root) => {
    const out = [];
    const scope = document.querySelector(root);
    const ctx = document.createElement("canvas").getContext("2d");
    const name = (el) => {
      const t = el.closest("table");
      const row = el.closest("tr");
      return `${t ? "#" + (t.id || t.className) : ""} row ${row ? row.rowIndex : "?"} cell ${el.cellIndex ?? "?"}`;
    };
    for (const td of scope.querySelectorAll("td, th")) {
      if (!td.offsetParent) continue;
      if (td.scrollWidth > td.clientWidth + 1) out.push(`${name(td)}: content ${td.scrollWidth} px in a cell of ${td.clientWidth} px (${td.textContent.trim().slice(0, 40)})`);
    }
    for (const i of scope.querySelectorAll("td input, td select")) {
      if (!i.offsetParent) continue;
      const cs = getComputedStyle(i);
      const room = i.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      if (i.tagName === "SELECT") {
        ctx.font = cs.font;
        const text = i.selectedOptions[0] ? i.selectedOptions[0].text : "";
        // the arrow takes about 16 px of the box
        const need = ctx.measureText(text).width + 16;
        if (need > room + 0.5) out.push(`${i.id}: "${text}" needs ${need.toFixed(0)} px, has ${room.toFixed(0)} px`);
      } else if (i.value && i.scrollWidth > i.clientWidth) {
        out.push(`${i.id}: "${i.value}" is cut (${i.scrollWidth} > ${i.clientWidth})`);
      }
    }
    // The timeline's caption and tick labels do not overlap.
    for (const svg of scope.querySelectorAll("svg.tl")) {
      const texts = [...svg.querySelectorAll(".axis text")].map((t) => ({ t: t.textContent, r: t.getBoundingClientRect() })).sort((a, b) => a.r.left - b.r.left);
      for (let k = 1; k < texts.length; k++) {
        if (texts[k].r.left < texts[k - 1].r.right - 0.5) out.push(`timeline: "${texts[k - 1].t}" overlaps "${texts[k].t}"`);
      }
    }
    return out;
  }, root);
}
