package sluice.harness;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import com.alibaba.fastjson2.JSONWriter;
import com.alibaba.otter.canal.connector.core.producer.MQMessageUtils;
import com.alibaba.otter.canal.parse.driver.mysql.packets.server.ResultSetPacket;
import com.alibaba.otter.canal.parse.inbound.mysql.MysqlConnection;
import com.alibaba.otter.canal.parse.inbound.mysql.dbsync.LogEventConvert;
import com.alibaba.otter.canal.parse.inbound.mysql.dbsync.TableMetaCache;
import com.alibaba.otter.canal.parse.inbound.mysql.tsdb.DatabaseTableMeta;
import com.alibaba.otter.canal.parse.inbound.mysql.tsdb.MemoryTableMeta;
import com.alibaba.otter.canal.protocol.CanalEntry;
import com.alibaba.otter.canal.protocol.FlatMessage;
import com.taobao.tddl.dbsync.binlog.FileLogFetcher;
import com.taobao.tddl.dbsync.binlog.LogContext;
import com.taobao.tddl.dbsync.binlog.LogDecoder;
import com.taobao.tddl.dbsync.binlog.LogEvent;
import com.taobao.tddl.dbsync.binlog.LogPosition;
import com.taobao.tddl.dbsync.binlog.event.RowsLogEvent;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * canal's own sqlType and mysqlType of rows a server logged: canal's binlog decoder (canal.parse.dbsync
 * 1.1.8) reads the server's binlog file, LogEventConvert (canal.parse) turns each rows event into an
 * Entry with canal's table meta, and MQMessageUtils (connector.core 1.1.8) makes the FlatMessage canal
 * puts on Kafka. The table meta is canal's too: MemoryTableMeta parsing the server's SHOW CREATE TABLE
 * (what TableMetaCache asks the server, with the time-series table meta canal enables by default),
 * here given on stdin instead of asked over canal's own connection.
 *
 * <pre>
 *   stdin: {"file": binlog path, "start": position, "end": position,
 *           "tables": [{"schema": s, "table": t, "ddl": SHOW CREATE TABLE text}]}
 *   stdout: per rows event of those tables in [start, end): {"database","table","type","sqlType","mysqlType","data"}
 * </pre>
 */
final class CanalTypes {
    private CanalTypes() {}

    static void run(BufferedReader in) throws Exception {
        StringBuilder text = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            text.append(line).append('\n');
        }
        JSONObject spec = JSON.parseObject(text.toString());
        MemoryTableMeta meta = new MemoryTableMeta();
        JSONArray tables = spec.getJSONArray("tables");
        for (int i = 0; i < tables.size(); i++) {
            JSONObject table = tables.getJSONObject(i);
            meta.apply(DatabaseTableMeta.INIT_POSITION, table.getString("schema"), table.getString("ddl"), null);
        }
        LogEventConvert convert = new LogEventConvert();
        convert.setTableMetaCache(new TableMetaCache(new NoServer(), meta));
        read(new File(spec.getString("file")), spec.getLongValue("start"), spec.getLongValue("end"), convert);
    }

    private static void read(File file, long start, long end, LogEventConvert convert) throws Exception {
        LogDecoder decoder = new LogDecoder(LogEvent.UNKNOWN_EVENT, LogEvent.ENUM_END_EVENT);
        LogContext context = new LogContext();
        context.setLogPosition(new LogPosition(file.getName(), start));
        long id = 0;
        try (FileLogFetcher fetcher = new FileLogFetcher(1 << 20)) {
            fetcher.open(file, start);
            while (fetcher.fetch()) {
                LogEvent event = decoder.decode(fetcher, context);
                if (event == null) {
                    continue;
                }
                long at = event.getLogPos() - event.getEventLen();
                if (at >= end) {
                    break;
                }
                if (at >= start && event instanceof RowsLogEvent) {
                    CanalEntry.Entry entry = convert.parseRowsEvent((RowsLogEvent) event);
                    if (entry != null) {
                        print(entry, ++id);
                    }
                }
            }
        }
    }

    private static void print(CanalEntry.Entry entry, long id) throws Exception {
        MQMessageUtils.EntryRowData data = new MQMessageUtils.EntryRowData();
        data.entry = entry;
        data.rowChange = CanalEntry.RowChange.parseFrom(entry.getStoreValue());
        List<FlatMessage> messages = MQMessageUtils.messageConverter(new MQMessageUtils.EntryRowData[] {data}, id);
        for (FlatMessage message : messages) {
            Map<String, Object> seen = new LinkedHashMap<>();
            seen.put("database", message.getDatabase());
            seen.put("table", message.getTable());
            seen.put("type", message.getType());
            seen.put("sqlType", message.getSqlType());
            seen.put("mysqlType", message.getMysqlType());
            seen.put("data", message.getData());
            System.out.println(JSON.toJSONString(seen, JSONWriter.Feature.WriteNulls));
        }
    }

    /** No server: TableMetaCache's questions about RDS and PolarX fail as on a plain MySQL/MariaDB. */
    private static final class NoServer extends MysqlConnection {
        @Override
        public ResultSetPacket query(String cmd) throws IOException {
            throw new IOException("the harness has no server connection: " + cmd);
        }
    }
}
