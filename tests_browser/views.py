"""How a bertviz view sits on a page: one JavaScript measure shared by the JupyterLab test of notebook 06
(test_views_on_open.py) and the website test (test_site.py).

``VIEW_GEOMETRY_JS`` is a JavaScript function ``(root, area, visible) => {...}``: ``root`` is a view's
``[id^="bertviz-"]`` element, ``area`` the output box it lives in, ``visible`` the rectangle it must fit in
(the output area in JupyterLab, the article column on the site). It returns:

- ``elements``, ``lines``, ``thumbnails``: what the view's SVG drew (0 when it has no SVG);
- ``width``: from the SVG's left edge to the right edge of what it draws (its content can be wider than the
  element);
- ``fits``: what it draws lies inside ``visible``;
- ``scrolls``, ``scrollRange``: an ancestor inside ``area`` scrolls sideways, and by how many pixels;
- ``reach``: scrolled to the far right, the drawing's right edge is inside that scrolling box, and the box
  itself is inside ``visible`` (the learner can reach every thumbnail).
"""

VIEW_GEOMETRY_JS = r"""
(root, area, visible) => {
  const svg = root.querySelector('#vis svg');
  if (!svg) return {elements: 0, lines: 0, thumbnails: 0, width: 0, fits: false, scrolls: false, scrollRange: 0,
                    reach: false};
  const drawnRight = () => {  // what the view draws, not the SVG element's box
    let right = svg.getBoundingClientRect().right;
    for (const e of svg.querySelectorAll('rect, text, line')) right = Math.max(right, e.getBoundingClientRect().right);
    return right;
  };
  let scroller = null;  // the nearest ancestor inside the output that scrolls sideways
  for (let e = svg; e && e !== area.parentElement; e = e.parentElement) {
    const o = getComputedStyle(e).overflowX;
    if ((o === 'auto' || o === 'scroll') && e.scrollWidth > e.clientWidth) { scroller = e; break; }
  }
  const left = svg.getBoundingClientRect().left, right = drawnRight();
  let reach = false;
  if (scroller) {
    scroller.scrollLeft = scroller.scrollWidth;
    const box = scroller.getBoundingClientRect();
    reach = drawnRight() <= box.right + 1 && box.right <= visible.right + 1;
    scroller.scrollLeft = 0;
  }
  return {
    elements: svg.querySelectorAll('*').length,
    lines: svg.querySelectorAll('line').length,
    thumbnails: svg.querySelectorAll('rect.attn_background').length,
    width: right - left,
    fits: right <= visible.right + 1 && left >= visible.left - 1,
    scrolls: !!scroller,
    scrollRange: scroller ? scroller.scrollWidth - scroller.clientWidth : 0,
    reach,
  };
}
"""
