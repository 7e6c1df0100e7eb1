-- wrk script: POST the request body in $KILN_BODY (a file) to $KILN_PATH; count non-2xx.
wrk.method = "POST"
wrk.path = os.getenv("KILN_PATH") or "/v2/models/tiny_cnn/infer"
local f = assert(io.open(os.getenv("KILN_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
if (os.getenv("KILN_HEADER_LEN") or "") ~= "" then
  wrk.headers["Inference-Header-Content-Length"] = os.getenv("KILN_HEADER_LEN")
end
