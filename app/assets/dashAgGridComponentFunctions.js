/* Cell renderers the grids name (app/components.py Column.link). */
var dagcomponentfuncs = (window.dashAgGridComponentFunctions = window.dashAgGridComponentFunctions || {});

/* A link to a page of this dashboard: the href template's {field}s filled from the row
   (URL-encoded); a plain click navigates inside the app the way dcc.Link does. The text
   is a React child, so a stored string is shown as text, never as markup. */
dagcomponentfuncs.Link = function (props) {
    var data = props.data || {};
    var href = props.colDef.cellRendererParams.href.replace(/\{(\w+)\}/g, function (_, field) {
        return encodeURIComponent(data[field] == null ? "" : String(data[field]));
    });
    var text = props.valueFormatted != null ? props.valueFormatted : props.value;
    return React.createElement("a", {
        href: href,
        className: "grid-link",
        onClick: function (event) {
            if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey || event.button !== 0) {
                return;
            }
            event.preventDefault();
            window.history.pushState({}, "", href);
            window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
            window.scrollTo(0, 0);
        },
    }, text == null ? "" : String(text));
};
