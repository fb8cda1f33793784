package floeline.delta;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.metric.SQLMetrics;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The commits of a batch's tables whose data files one shared write made
 * (warehouse/shared_write.py, commits.FilesCommits). One call per table does what the
 * Python side did in about 40 py4j round trips (each 0.2-4 ms with the stream sharing
 * two cores): 100 new tables took 2.0 s to start their transactions and 2.5 s to
 * commit (bench/RESULTS.md, issue 26).
 *
 * <p>The transactions start before the write, as a Delta write's do, so a commit
 * conflicts with what another writer committed meanwhile.
 */
public final class TableCommits {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final SparkSession spark;
    private final OptimisticTransaction[] transactions;

    private TableCommits(SparkSession spark, OptimisticTransaction[] transactions) {
        this.spark = spark;
        this.transactions = transactions;
    }

    /** Start a transaction on each table of `tables` (a JSON array of their paths; a
     *  table that does not exist yet reads version -1), `threads` at a time: each lists
     *  its table's log. */
    public static TableCommits start(SparkSession spark, String tables, int threads) throws Exception {
        JsonNode named = JSON.readTree(tables);
        String[] paths = new String[named.size()];
        for (int i = 0; i < paths.length; i++) {
            paths[i] = named.get(i).asText();
        }
        OptimisticTransaction[] started = new OptimisticTransaction[paths.length];
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(threads, paths.length)));
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int i = 0; i < paths.length; i++) {
                final int table = i;
                done.add(pool.submit(() -> {
                    SparkSession.setActiveSession(spark);
                    started[table] = DeltaLog.forTable(spark, paths[table]).startTransaction();
                    return null;
                }));
            }
            for (Future<?> f : done) {
                try {
                    f.get();
                } catch (java.util.concurrent.ExecutionException e) {
                    throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
                }
            }
        } finally {
            pool.shutdown();
        }
        return new TableCommits(spark, started);
    }

    /** The txn (SetTransaction) actions of `entries`, a JSON object {appId: version},
     *  set now: one py4j call for what took one per action (warehouse/commits.py). */
    public static scala.collection.immutable.Seq<Action> txnActions(String entries) throws IOException {
        JsonNode named = JSON.readTree(entries);
        long now = System.currentTimeMillis();
        List<Action> actions = new ArrayList<>();
        var ids = named.fieldNames();
        while (ids.hasNext()) {
            String appId = ids.next();
            actions.add(new SetTransaction(appId, named.get(appId).asLong(), Option.apply((Object) now)));
        }
        return CollectionConverters.asScala(actions).toList();
    }

    /** Per table, in start's order: {"readVersion": n, "metaData": the table's metaData
     *  action (absent for a table that does not exist yet)}, as a JSON array. */
    public String tables() throws IOException {
        ArrayNode out = JSON.createArrayNode();
        for (OptimisticTransaction txn : transactions) {
            ObjectNode table = out.addObject();
            table.put("readVersion", txn.readVersion());
            if (txn.readVersion() >= 0) {
                table.set("metaData", JSON.readTree(txn.metadata().json()).get("metaData"));
            }
        }
        return out.toString();
    }

    /**
     * Move the files of table `index` into its folder and commit them in one Delta
     * commit. `request` (JSON): {"folder": the table's path, "files": [{"source": where
     * the file is, "add": its add action without path and partitionValues}],
     * "metaData": the metaData action creating the table (only for a new one),
     * "userMetadata": the commit's, "txns": {appId: version} (the positions' txn
     * actions, warehouse/position_txns.py), "metrics": {name: count} (operationMetrics)}.
     * Returns, as JSON, what the commit left: {"version", "checkpointVersion",
     * "interval" (the table's delta.checkpointInterval, or null), "id" (the table's)}.
     * A failure is thrown as it is: nothing of it is committed.
     */
    public String commit(int index, String request) throws Exception {
        SparkSession.setActiveSession(spark);
        OptimisticTransaction txn = transactions[index];
        JsonNode asked = JSON.readTree(request);
        List<Action> actions = new ArrayList<>();
        Path folder = new Path(asked.get("folder").asText());
        FileSystem fs = folder.getFileSystem(spark.sparkContext().hadoopConfiguration());
        fs.mkdirs(folder);
        for (JsonNode file : asked.get("files")) {
            Path source = new Path(file.get("source").asText());
            String name = source.getName();
            if (!fs.rename(source, new Path(folder, name))) {
                throw new IOException("could not move " + source + " into " + folder);
            }
            ObjectNode add = ((ObjectNode) file.get("add")).deepCopy();
            add.put("path", name);
            add.putObject("partitionValues");
            ObjectNode action = JSON.createObjectNode();
            action.set("add", add);
            actions.add(Action.fromJson(action.toString()));
        }
        JsonNode txns = asked.get("txns");
        if (txns != null && !txns.isNull()) {
            actions.addAll(CollectionConverters.asJava(txnActions(txns.toString())));
        }
        JsonNode metaData = asked.get("metaData");
        if (metaData != null && !metaData.isNull()) {
            txn.updateMetadataForNewTable((Metadata) Action.fromJson(metaData.toString()));
        }
        scala.collection.immutable.Map<String, SQLMetric> metrics = scala.collection.immutable.Map$.MODULE$.empty();
        var names = asked.get("metrics").fieldNames();
        while (names.hasNext()) {
            String name = names.next();
            SQLMetric metric = SQLMetrics.createMetric(spark.sparkContext(), name);
            metric.set(asked.get("metrics").get(name).asLong());
            metrics = metrics.updated(name, metric);
        }
        txn.registerSQLMetrics(spark, metrics);
        DeltaOperations.Write operation = new DeltaOperations.Write(
                SaveMode.Append, Option.empty(), Option.empty(),
                Option.apply(asked.get("userMetadata").asText()),
                Option.empty(), Option.empty(), Option.empty(), Option.empty(), Option.empty());
        txn.commit(CollectionConverters.asScala(actions).toList(), operation);
        Snapshot snapshot = txn.deltaLog().unsafeVolatileSnapshot();
        ObjectNode out = JSON.createObjectNode();
        out.put("version", snapshot.version());
        out.put("checkpointVersion", snapshot.checkpointProvider().version());
        Option<String> interval = snapshot.metadata().configuration().get("delta.checkpointInterval");
        if (interval.isDefined()) {
            out.put("interval", Integer.parseInt(interval.get()));
        } else {
            out.putNull("interval");
        }
        out.put("id", snapshot.metadata().id());
        return out.toString();
    }
}
