/* Functions the grids' column definitions name (app/components.py Column). */
var dagfuncs = (window.dashAgGridFunctions = window.dashAgGridFunctions || {});

/* A cell's display text, made on the server (app.formats) and sent with the row. */
dagfuncs.shown = function (params) {
    var key = params.colDef.field + "__shown";
    if (params.data && Object.prototype.hasOwnProperty.call(params.data, key)) {
        return params.data[key];
    }
    return params.value;
};
